"""``python -m bert_exp +experiment=NAME [overrides]``: a thin Hydra entry point around run.run()."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from .runner import resolvers  # noqa: F401  (registers the config resolvers)
from .resources import resource_dir
from .errors import UserError


@hydra.main(version_base="1.3", config_path=str(resource_dir("conf")), config_name="config")
def _main(cfg: DictConfig) -> float | None:
    try:
        if "pipeline" in cfg:  # stages run as processes of their own: no Lightning here
            from .runner.pipeline import run_pipeline

            return run_pipeline(cfg)
        from .runner.run import run  # imported here so --help and --cfg stay fast

        return run(cfg)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:  # our groups and presets; Hydra's: --hydra-help
        from .runner.help import help_text

        print(help_text())
        return
    # `--cfg job` shows the config as it will run: interpolations resolved (Hydra's --resolve)
    if "--cfg" in sys.argv[1:] or "-c" in sys.argv[1:]:
        if "--resolve" not in sys.argv:
            sys.argv.append("--resolve")
    _main()


if __name__ == "__main__":
    main()
