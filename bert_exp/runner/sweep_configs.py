"""``python -m bert_exp -m [OVERRIDES] --cfg job``: the config of each job a sweep would run (Hydra itself
refuses --cfg together with --multirun)."""

from __future__ import annotations

import sys

from omegaconf import OmegaConf, open_dict

from .command_line import _strip_cfg, expand


def print_sweep_configs(args: list[str], cfg_type: str) -> int:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ..resources import resource_dir

    overrides, package = _strip_cfg(args)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
            base = compose("config", overrides=[o for o in overrides if "," not in o and "(" not in o],
                           return_hydra_config=True)
            params = OmegaConf.select(base, "hydra.sweeper.params", default=None) or {}
            from_file = [f"{k}={v}" for k, v in params.items() if f"{k}=" not in " ".join(overrides)]
            jobs = expand([*from_file, *overrides])
            sweep_dir = OmegaConf.select(base, "hydra.sweep.dir")  # one for all the jobs
            for num, job in enumerate(jobs):
                cfg = compose("config", overrides=job, return_hydra_config=True)
                with open_dict(cfg):
                    cfg.hydra.job.num = num
                    cfg.hydra.runtime.output_dir = f"{sweep_dir}/{num}"
                HydraConfig.instance().set_config(cfg)
                if cfg_type == "job":
                    with open_dict(cfg):
                        del cfg["hydra"]
                node = cfg.hydra if cfg_type == "hydra" else cfg
                if package:
                    node = OmegaConf.select(node, package)
                print(f"# job {num}: {' '.join(job)}")
                text = OmegaConf.to_yaml(node, resolve=cfg_type != "hydra") if OmegaConf.is_config(node) else str(node)
                print(text)
    except (HydraException, OmegaConfBaseException) as err:
        from .overrides import unknown_override_error

        print(f"error: {unknown_override_error(args, err) or err}", file=sys.stderr)
        return 2
    return 0
