"""``+experiment=pipeline_tiny`` under DDP on CPU (gloo, two processes per stage): pre-training, then
CoLA, SQuAD and (a stage added on the command line) POS tagging from its checkpoint, in one W&B group. Each DDP run has one output directory and one
log, and its evaluation equals a single-process evaluation of the same checkpoint exactly (no example
repeated or dropped by the sharding)."""

import json

import pytest

from bert_exp.tools.report import main as report_main
from bert_exp.tools.report import report
from bert_exp.runner.run import run
from helpers import compose_config, is_png, run_cli
from wandb_records import offline_run

pytestmark = pytest.mark.slow

STAGES = [
    'pipeline.pretrain.overrides=["data.files=[${paths.data_dir}/corpus/inaugural/19*.txt]",'
    '"data.tokenizer.vocab_size=2000","trainer.max_steps=6","trainer.val_check_interval=3",'
    '"trainer.limit_val_batches=2"]',
    'pipeline.cola.overrides=["trainer.max_steps=4"]',
    # three steps of 32 windows read at most 96 windows, fewer than 96 questions make: more would only be tokenized
    'pipeline.squad.overrides=["trainer.max_steps=3","+data.limit_val_examples=40","+data.limit_train_examples=96"]',
    # a tagging stage added on the command line, feature-based on the second-to-last layer: its last layer
    # gets no gradient, which DDP accepts only because such parameters are frozen
    "+pipeline.pos.experiment=pos_tiny", "+pipeline.pos.init_from=pretrain",
    '+pipeline.pos.overrides=["trainer.max_steps=3","data.limit_train_examples=48","data.limit_val_examples=16",'
    '"task.module.layers=second_to_last"]',
]


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


@pytest.fixture(scope="module")
def pipeline(env, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("pipeline") / "run"
    result = run_cli(["+experiment=pipeline_tiny", "hardware=ddp_cpu", "trainer.log_every_n_steps=1", *STAGES,
                      f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result


def stage_info(run_dir, stage):
    return json.loads((run_dir / stage / "run.json").read_text())


def test_pipeline_fine_tunes_from_its_pretraining_in_one_wandb_group(pipeline):
    run_dir, _ = pipeline
    results = json.loads((run_dir / "pipeline.json").read_text())
    assert list(results) == ["pretrain", "cola", "squad", "pos"]
    assert all(r["status"] == "finished" and r["value"] is not None for r in results.values())
    pretrain_ckpt = str(run_dir / "pretrain" / "checkpoints" / "last.ckpt")
    for stage in ("cola", "squad", "pos"):
        assert stage_info(run_dir, stage)["initialised_from"] == pretrain_ckpt  # handed over by path
    wandb_runs = [offline_run(run_dir / stage) for stage in results]
    assert {w["group"] for w in wandb_runs} == {"pipeline_tiny"}
    assert [w["job_type"] for w in wandb_runs] == ["pretraining", "cola", "squad", "pos"]


def test_report_of_a_pipeline_and_its_runs(pipeline):
    run_dir, _ = pipeline
    index = report(run_dir).read_text()
    assert "| [cola](../cola/report/report.md) | finished | val/mcc |" in index
    pretrain = (run_dir / "pretrain" / "report" / "report.md").read_text()
    assert "![train](train.png)" in pretrain and "![val](val.png)" in pretrain and "| val/mlm_loss |" in pretrain
    for stage in ("pretrain", "cola", "squad"):
        for name in ("train.png", "val.png"):
            assert is_png(run_dir / stage / "report" / name), (stage, name)


def test_report_names_a_directory_it_cannot_read(tmp_path, capsys):
    assert report_main([str(tmp_path)]) == 2
    assert f"{tmp_path}: neither a run directory" in capsys.readouterr().err


def test_ddp_runs_have_one_output_directory_and_one_log_each(pipeline):
    run_dir, _ = pipeline
    for stage in ("pretrain", "cola", "squad", "pos"):
        info = stage_info(run_dir, stage)
        assert info["host"]["world_size"] == 2 and info["status"] == "finished"
    runs = [p for p in run_dir.rglob("run.json") if "wandb" not in p.parts]  # (W&B keeps a copy of its own)
    assert sorted(p.parent.name for p in runs) == ["cola", "pos", "pretrain", "squad"]
    logs = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*.log") if "wandb" not in p.parts)
    assert logs == ["bert_exp.log", "cola/bert_exp.log", "pos/bert_exp.log", "pretrain/bert_exp.log",
                    "squad/bert_exp.log"]
    pos = stage_info(run_dir, "pos")  # the last layer, never read, was frozen rather than left to stall DDP
    assert pos["parameters"]["trainable"] < pos["parameters"]["total"]
    assert stage_info(run_dir, "pretrain")["host"]["device_batch_size"] == 16  # global 32 over two processes


def evaluate_single_process(env, monkeypatch, overrides, run_dir):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    run(compose_config([*overrides, "trainer.max_steps=0", "logger=csv"], run_dir=run_dir))
    return json.loads((run_dir / "run.json").read_text())


def test_ddp_cola_evaluation_equals_single_process(pipeline, env, monkeypatch, tmp_path):
    run_dir, _ = pipeline
    ddp = stage_info(run_dir, "cola")
    single = evaluate_single_process(
        env, monkeypatch, ["+experiment=cola_tiny", f"task.init_from={run_dir / 'cola' / 'checkpoints' / 'last.ckpt'}"],
        tmp_path / "single")
    assert single["fresh_parameters"] == []  # the classifier came from the checkpoint too
    keys = [k for k in single["metrics"] if k.startswith("val/") and ("mcc" in k or "acc" in k)]
    assert len(keys) == 4  # val/mcc, val/acc and GLUE's dev set's own
    assert {k: ddp["metrics"][k] for k in keys} == {k: single["metrics"][k] for k in keys}
    assert any(single["metrics"][k] != 0 for k in keys if "mcc" in k)  # not a degenerate classifier


def test_ddp_squad_evaluation_equals_single_process(pipeline, env, monkeypatch, tmp_path):
    run_dir, _ = pipeline
    ddp = stage_info(run_dir, "squad")
    single = evaluate_single_process(
        env, monkeypatch, ["+experiment=squad_v1_tiny_local", "+data.limit_val_examples=40",
                           "+data.limit_train_examples=32",  # (max_steps=0: no training window is read)
                           f"task.init_from={run_dir / 'squad' / 'checkpoints' / 'last.ckpt'}"], tmp_path / "single")
    assert (ddp["metrics"]["val/exact_match"], ddp["metrics"]["val/f1"]) == \
        (single["metrics"]["val/exact_match"], single["metrics"]["val/f1"])
    predictions = json.loads((run_dir / "squad" / "predictions.json").read_text())
    assert len(predictions) == 40 and predictions == json.loads((tmp_path / "single" / "predictions.json").read_text())
    assert single["metrics"]["val/f1"] > 0  # some overlap to compare


def test_rerunning_a_pipeline_skips_finished_stages_and_resumes_an_interrupted_one(pipeline, env):
    run_dir, _ = pipeline
    # cola as if killed after its last checkpoint: run.json still says "running"
    cola = stage_info(run_dir, "cola")
    (run_dir / "cola" / "run.json").write_text(json.dumps({**cola, "status": "running"}))
    stamps = [(run_dir / s / "run.json").stat().st_mtime_ns for s in ("pretrain", "squad")]
    result = run_cli(["+experiment=pipeline_tiny", "hardware=ddp_cpu", "trainer.log_every_n_steps=1", *STAGES,
                      f"hydra.run.dir={run_dir}"], env=env, timeout=300)  # (a process left behind would wait)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("finished earlier, skipped") == 3
    assert [(run_dir / s / "run.json").stat().st_mtime_ns for s in ("pretrain", "squad")] == stamps
    # both DDP processes continued from cola's last.ckpt, in place, as the same W&B run
    resumed = stage_info(run_dir, "cola")
    assert resumed["status"] == "finished" and resumed["resumed_from"] == str(run_dir / "cola" / "checkpoints" / "last.ckpt")
    assert (resumed["global_step"], resumed["wandb_id"]) == (cola["global_step"], cola["wandb_id"])
    assert resumed["metrics"]["val/mcc"] == cola["metrics"]["val/mcc"]  # the same weights, validated again
    # the same directory with another setting for a finished stage: refused, not skipped with its old result
    stages = [s.replace('"trainer.max_steps=3","+data.limit_val_examples=40"', '"trainer.max_steps=4",'
                        '"+data.limit_val_examples=40"') for s in STAGES]
    assert stages != STAGES
    result = run_cli(["+experiment=pipeline_tiny", "hardware=ddp_cpu", "trainer.log_every_n_steps=1", *stages,
                      f"hydra.run.dir={run_dir}"], env=env, timeout=300)
    assert result.returncode == 2 and f"{run_dir / 'squad'} holds another job" in result.stderr, result.stderr[-2000:]
    assert [(run_dir / s / "run.json").stat().st_mtime_ns for s in ("pretrain", "squad")] == stamps


def test_a_typo_in_a_stage_stops_the_pipeline_before_any_stage_runs(env, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(["+experiment=pipeline_tiny", 'pipeline.cola.overrides=["+trainer.max_stepz=3"]',
                      f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 2 and "pipeline.cola" in result.stderr and "trainer.max_stepz" in result.stderr
    assert not (run_dir / "pretrain").exists()


def test_pipeline_base_composes_every_stage_for_a_multi_gpu_machine(tmp_path, monkeypatch):
    """pipeline_base is not run here (BERT-base, GPUs); every stage composes and passes the checks a
    run makes before work, with hardware=ddp as on an 8-GPU machine, each starting from the stage before."""
    import torch
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from bert_exp.resources import resource_dir
    from bert_exp.runner.pipeline import check_stages

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
        cfg = compose("config", overrides=["+experiment=pipeline_base"])
        stages = check_stages(cfg, tmp_path, ["hardware=ddp"])
        phase2 = compose("config", overrides=[*stages["phase2"], f"paths.run_dir={tmp_path / 'phase2'}"])
    assert list(stages) == ["phase1", "phase2", "cola", "squad"]
    assert f"task.init_from={tmp_path / 'phase1'}" in stages["phase2"]
    assert all(f"task.init_from={tmp_path / 'phase2'}" in stages[s] for s in ("cola", "squad"))
    assert all("experiment_name=pipeline_base" in o and "hardware=ddp" in o for o in stages.values())
    assert (phase2.data.instances.max_seq_length, phase2.trainer.devices, phase2.trainer.precision) == (512, -1, "auto")
