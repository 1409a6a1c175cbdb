"""Sweeps: a Hydra multirun grid (one W&B run per job, a summary table, finished jobs skipped and
interrupted ones resumed on a re-run), the Optuna sweeper, and W&B sweep specs of the ready-made sweeps."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from bert_exp.resources import resource_dir
from bert_exp.tools.report import report
from bert_exp.tools.sweep import main as sweep_main
from bert_exp.tools.sweep import summarize, wandb_spec
from helpers import REPO, compose_config, is_png, run_cli
from wandb_records import offline_run

TINY = ["+experiment=pretrain_tiny", "data.files=[${paths.data_dir}/corpus/inaugural/19*.txt]",
        "data.tokenizer.vocab_size=2000", "trainer.max_steps=4", "trainer.val_check_interval=4",
        "trainer.limit_val_batches=1", "callbacks.progress_bar.refresh_rate=0"]


SWEEPS = sorted(p.stem for p in resource_dir("sweeps").glob("*.yaml"))


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


@pytest.mark.slow
def test_a_grid_multirun_summarises_and_a_rerun_skips_finished_jobs(env, tmp_path):
    """Under DDP (2 CPU processes per job): each job launches its own processes in its own directory,
    and the next job starts after the last one's processes and process group are gone."""
    sweep_dir = tmp_path / "sweep"
    args = ["-m", *TINY, "hardware=ddp_cpu", "optim.optimizer.lr=2e-3", "seed=1,2", f"hydra.sweep.dir={sweep_dir}",
            "logger.wandb.project=bert-seeds", "logger.wandb.entity=my-team", "logger.wandb.tags=[tiny,seeds]",
            "logger.wandb.notes=two seeds"]
    result = run_cli(args, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in jobs] == ["0", "1"]
    runs = [json.loads((job / "run.json").read_text()) for job in jobs]
    assert all(r["status"] == "finished" and r["global_step"] == 4 for r in runs)
    assert all(r["host"]["world_size"] == 2 for r in runs)
    # one directory and one log per job: the second process wrote into its job's directory, no other
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1"]
    assert sorted(str(p.relative_to(sweep_dir)) for p in sweep_dir.rglob("*.log") if "wandb" not in p.parts) == \
        ["0/bert_exp.log", "1/bert_exp.log"]
    # one W&B run per job, each finished before the next began, in the user's project and entity, grouped
    # by the sweep (experiment and sweep directory: another sweep of the preset is another group)
    wandb_runs = [offline_run(job) for job in jobs]
    assert len({w["id"] for w in wandb_runs}) == 2 and all(w["group"] == "pretrain_tiny-sweep" for w in wandb_runs)
    assert all((w["project"], w["entity"], w["tags"], w["notes"]) == ("bert-seeds", "my-team", ["tiny", "seeds"],
                                                                     "two seeds") for w in wandb_runs)
    assert all(w["summary"]["status"] == '"finished"' for w in wandb_runs)
    # the summary: the seeds pooled into one row, with their mean and median
    summary = (sweep_dir / "summary.md").read_text()
    assert "| monitor | jobs | finished | mean | median | values |" in summary
    losses = sorted(r["metrics"]["val/mlm_loss"] for r in runs)
    assert losses[0] != losses[1]  # the seeds differ
    mean = f"{sum(losses) / 2:.4f}"
    assert f"| val/mlm_loss | 2 | 2 | {mean} | {mean} |" in summary
    assert "sweep summary:" in result.stdout

    # the report: the metric against the swept parameter, every job's curve, the table
    markdown = report(sweep_dir)
    assert is_png(sweep_dir / "report" / "val_curves.png")
    assert "![val_curves](val_curves.png)" in markdown.read_text() and "| val/mlm_loss | 2 | 2 |" in markdown.read_text()

    # interrupt job 1 (as if killed after its last checkpoint) and re-run the same sweep
    info = json.loads((jobs[1] / "run.json").read_text())
    (jobs[1] / "run.json").write_text(json.dumps({**info, "status": "running"}))
    stamp = (jobs[0] / "run.json").stat().st_mtime_ns
    result = run_cli(args, env=env, timeout=300)  # (a process left behind would wait for the other forever)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("skipping a finished job") == 1
    assert (jobs[0] / "run.json").stat().st_mtime_ns == stamp
    resumed = json.loads((jobs[1] / "run.json").read_text())
    # both processes continued from the job's last.ckpt (a process that started afresh would train 4
    # steps alone and leave the other waiting)
    assert resumed["status"] == "finished" and resumed["resumed_from"] == str(jobs[1] / "checkpoints" / "last.ckpt")
    assert resumed["global_step"] == 4 and resumed["wandb_id"] == info["wandb_id"]
    assert resumed["metrics"]["val/mlm_loss"] == info["metrics"]["val/mlm_loss"]  # the same weights, validated again


@pytest.mark.slow
def test_optuna_sweeper_runs_trials_and_gets_each_jobs_metric(env, tmp_path):
    sweep_dir = tmp_path / "optuna"
    result = run_cli(["-m", *TINY, "+sweeps=pretrain_optuna", "hydra.sweeper.n_trials=2", "logger=csv",
                      f"hydra.sweep.dir={sweep_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/run.json"))]
    assert len(runs) == 2 and all(r["status"] == "finished" for r in runs)
    optimization = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    # the sweeper saw the jobs' returned metrics: its best value is the lowest val/mlm_loss
    assert optimization["best_value"] == pytest.approx(min(r["metrics"]["val/mlm_loss"] for r in runs))


@pytest.mark.parametrize("name", SWEEPS)
def test_every_ready_made_sweep_composes_and_converts_to_a_wandb_spec(name):
    experiment = {"cola": "cola_base", "squad": "squad_v1_base"}.get(name.split("_")[0], "pretrain_tiny")
    overrides = [f"+experiment={experiment}", f"+sweeps={name}"]
    cfg = compose_config(overrides)
    assert cfg.experiment_name == experiment
    spec = wandb_spec(overrides)
    assert spec["metric"]["name"] == cfg.task.monitor
    assert spec["project"] == "bert_exp" and "entity" not in spec  # where `wandb sweep` puts it
    assert wandb_spec([*overrides, "logger.wandb.project=p", "logger.wandb.entity=team"])["entity"] == "team"
    assert spec["command"][:5] == ["${env}", "${interpreter}", "-m", "bert_exp", f"+experiment={experiment}"]
    assert spec["command"][-1] == "${args_no_hyphens}" and spec["parameters"]
    # what an agent runs composes: each parameter's first value as a Hydra override sets that key
    first = {k: v["values"][0] if "values" in v else v["min"] for k, v in spec["parameters"].items()}
    chosen = compose_config([f"+experiment={experiment}", *(f"{k}={v}" for k, v in first.items())])
    groups = {k for k in first if (resource_dir("conf") / k).is_dir()}  # a config group, e.g. objective=mlm
    assert {k: OmegaConf.select(chosen, k) for k in first if k not in groups} == {
        k: v for k, v in first.items() if k not in groups}
    if "objective" in groups:
        assert OmegaConf.select(chosen, "data.objective", default="mlm_nsp") == first["objective"]


@pytest.mark.slow
def test_a_wandb_agent_runs_a_job_of_the_spec_as_its_own_run(env, tmp_path):
    """What ``wandb agent`` does with a spec, with W&B's own code building the command: each job runs
    our CLI with the chosen values as Hydra overrides, and logs into the run the agent created."""
    from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args
    from wandb.sdk.lib.config_util import save_config_file_from_dict

    spec = wandb_spec([*TINY, "logger=wandb", "+sweeps=pretrain_lr_warmup"])
    chosen = {"args": {key: {"value": values["values"][-1]} for key, values in spec["parameters"].items()},
              "run_id": "agentrun1"}
    arguments = create_sweep_command_args(chosen)
    arguments.update(env=["/usr/bin/env"], interpreter=[sys.executable])
    command = [part for chunk in create_sweep_command(spec["command"])
               for part in (arguments[chunk[2:-1]] if chunk.startswith("${") else [chunk])]
    params = tmp_path / "sweep-params.yaml"  # the agent hands the run its values in this file too
    save_config_file_from_dict(str(params), chosen["args"])
    agent_env = {**os.environ, **env, "BERT_EXP_OUTPUTS": str(tmp_path / "outputs"), "WANDB_MODE": "offline",
                 "WANDB_SILENT": "true", "WANDB_RUN_ID": "agentrun1", "WANDB_SWEEP_ID": "sweep1",
                 "WANDB_SWEEP_PARAM_PATH": str(params)}
    result = subprocess.run(command, cwd=REPO, env=agent_env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs").glob("pretraining/pretrain_tiny/*")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["wandb_id"] == "agentrun1"
    assert info["config"]["optim"]["optimizer"]["lr"] == 2e-3 and info["config"]["optim"]["scheduler"]["warmup_steps"] == 100
    wandb_run = offline_run(run_dir)
    assert wandb_run["id"] == "agentrun1" and "val/mlm_loss" in wandb_run["history_keys"]  # the spec's metric
    assert wandb_run["group"] == "pretrain_tiny-sweep1"  # the sweep's own group (W&B also files it under the sweep)


def test_cola_paper_grid_is_the_papers(capsys):
    assert sweep_main(["wandb", "cola_paper_grid", "+experiment=cola_base"]) == 0
    spec = yaml.safe_load(capsys.readouterr().out)
    assert spec["method"] == "grid" and spec["metric"] == {"name": "val/mcc", "goal": "maximize"}
    assert spec["parameters"]["optim.optimizer.lr"]["values"] == [5e-5, 3e-5, 2e-5]
    assert spec["parameters"]["global_batch_size"]["values"] == [16, 32]
    assert len(spec["parameters"]["seed"]["values"]) >= 3


def test_summary_groups_seeds_and_reports_mean_and_median():
    def job(lr, seed, value, status="finished"):
        return {"overrides": ["+experiment=x", f"optim.optimizer.lr={lr}", f"seed={seed}"], "monitor": "val/mcc",
                "status": status, "metrics": {"val/mcc": value}}

    swept, rows = summarize([job(1, 1, 0.2), job(1, 2, 0.4), job(1, 3, 0.9), job(2, 1, 0.1), job(2, 2, 0.5, "running")])
    assert swept == ["optim.optimizer.lr"]
    by_lr = {row["optim.optimizer.lr"]: row for row in rows}
    assert by_lr["1"]["mean"] == pytest.approx(0.5) and by_lr["1"]["median"] == pytest.approx(0.4)
    assert (by_lr["2"]["jobs"], by_lr["2"]["finished"], by_lr["2"]["mean"]) == (2, 1, pytest.approx(0.1))


def test_sweep_report_plots_the_metric_against_each_swept_parameter(tmp_path):
    for job, (lr, seed) in enumerate([(1e-3, 1), (1e-3, 2), (2e-3, 1), (2e-3, 2)]):
        job_dir = tmp_path / str(job)
        (job_dir / "logs").mkdir(parents=True)
        value = 0.1 * job + 0.3
        (job_dir / "run.json").write_text(json.dumps({
            "overrides": ["+experiment=cola_tiny", f"optim.optimizer.lr={lr}", f"seed={seed}"],
            "monitor": "val/mcc", "status": "finished", "metrics": {"val/mcc": value}}))
        (job_dir / "logs" / "metrics.csv").write_text(
            "epoch,step,train/loss,val/mcc\n0,0,0.7,\n0,9,0.6,\n0,9,," + f"{value / 2}\n0,19,,{value}\n")
    markdown = report(tmp_path).read_text()
    assert is_png(tmp_path / "report" / "sweep_optim.optimizer.lr.png") and is_png(tmp_path / "report" / "val_curves.png")
    assert "| 0.001 | val/mcc | 2 | 2 | 0.3500 | 0.3500 | 0.3000, 0.4000 |" in markdown
    assert "![sweep_optim.optimizer.lr](sweep_optim.optimizer.lr.png)" in markdown


def test_sweep_report_labels_each_job_by_what_sets_it_apart():
    from bert_exp.tools.run_info import job_labels

    runs = [{"overrides": ["+experiment=x", f"optim.optimizer.lr={lr}", f"seed={seed}", "hydra.job.num=0"]}
            for lr, seed in [(1e-3, 1), (1e-3, 2), (2e-3, 1)]]
    assert job_labels(runs) == ["optim.optimizer.lr=0.001 seed=1", "optim.optimizer.lr=0.001 seed=2",
                                "optim.optimizer.lr=0.002 seed=1"]
