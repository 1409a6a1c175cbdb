"""A pipeline's evaluate stage: the downstream suite over earlier stages' models and scratch in their shape."""

import pytest

from bert_exp.resources import minilm_dir
from bert_exp.runner.pipeline import evaluate_command
from bert_exp.runner.validation import ConfigError
from helpers import compose_config


def test_pipeline_budget_scores_the_pretrained_model_scratch_and_minilm(tmp_path):
    cfg = compose_config(["+experiment=pipeline_budget"], tmp_path)
    command = evaluate_command(cfg, "evaluate", tmp_path, ["hardware=cpu", "seed=7"])
    assert command[:2] == ["-m", "bert_exp.evaluate"]
    # the model of the second phase (sequences of 256 after 64), and scratch in its shape
    assert list(cfg.pipeline) == ["pretrain", "pretrain_long", "evaluate"]
    assert cfg.pipeline.pretrain_long.init_from == "pretrain"
    assert command[2:5] == [f"pretrain={tmp_path / 'pretrain_long'}", f"scratch=scratch:{tmp_path / 'pretrain_long'}",
                            f"all-MiniLM-L6-v2={minilm_dir()}"]
    assert command[command.index("--seeds") + 1] == "3" and command[command.index("--out") + 1] == str(tmp_path / "evaluate")
    tasks = command[command.index("--tasks") + 1:command.index("--override")]
    assert tasks == ["sst2", "cola", "squad", "pos", "squad_v2"]  # POS tagging, and SQuAD 2.0 on the local split
    assert ["--override", "hardware=cpu"] == command[-2:]  # the pipeline's seed is not the suite's
    assert "seed=7" not in command
    for seed in ("++seed=7", "+seed=7"):  # however the seed was written
        assert seed not in evaluate_command(cfg, "evaluate", tmp_path, ["hardware=cpu", seed])


def test_evaluate_stage_names_only_earlier_stages(tmp_path):
    cfg = compose_config(["+experiment=pipeline_budget",
                          "pipeline.evaluate.evaluate.sources=[later]", "+pipeline.later.experiment=pretrain_tiny"],
                         tmp_path)
    with pytest.raises(ConfigError, match="later is not an earlier stage"):
        evaluate_command(cfg, "evaluate", tmp_path, [])


def test_objective_ablation_pretrains_each_objective_on_one_budget_then_scores_all(tmp_path):
    from hydra import initialize_config_dir

    from bert_exp.resources import resource_dir
    from bert_exp.runner.pipeline import check_stages

    cfg = compose_config(["+experiment=pipeline_ablation_objectives", "ablation_budget=3m"], tmp_path)
    with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
        # every stage composes and validates; the command's own ablation_budget=3m is the pipeline's
        # variable, passed on through trainer.budget, not as an override a stage would refuse
        stages = check_stages(cfg, tmp_path, ["ablation_budget=3m", "hardware=cpu"])
    objectives = ["mlm_nsp", "mlm", "clm", "mlm_sop", "electra"]
    assert list(stages) == [*objectives, "evaluate"]
    for name in objectives:
        assert f"objective={name}" in stages[name] and "trainer.budget=3m" in stages[name]
        assert "+experiment=pretrain_budget" in stages[name]
        assert "hardware=cpu" in stages[name] and "ablation_budget=3m" not in stages[name]
    command = stages["evaluate"]
    assert command[2:8] == [f"{name}={tmp_path / name}" for name in objectives] + [f"scratch=scratch:{tmp_path / 'mlm'}"]
    assert command[command.index("--tasks") + 1:command.index("--tasks") + 3] == ["sst2", "cola"]
    # the command's own overrides reach every job; the suite's recipes set the classifiers' pooling themselves
    assert [command[i + 1] for i, arg in enumerate(command) if arg == "--override"] == ["hardware=cpu"]


def test_an_override_a_suite_task_lacks_stops_the_pipeline_before_any_stage(tmp_path):
    from hydra import initialize_config_dir

    from bert_exp.resources import resource_dir
    from bert_exp.runner.pipeline import check_stages

    # task.module.pooling is a classifier's option: SQuAD's jobs would fail only after the pre-training
    cfg = compose_config(["+experiment=pipeline_ablation_objectives", "pipeline.evaluate.evaluate.tasks=[sst2,squad]",
                          "+pipeline.evaluate.evaluate.overrides=[\"task.module.pooling=mean\"]"], tmp_path)
    with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
        with pytest.raises(ConfigError, match="pipeline.evaluate: the suite's squad jobs: .*pooling"):
            check_stages(cfg, tmp_path, [])


def test_the_comparison_after_bert_pre_trains_bert_each_recipe_and_each_change_on_one_budget(tmp_path):
    from hydra import initialize_config_dir

    from bert_exp.resources import resource_dir
    from bert_exp.runner.pipeline import check_stages

    cfg = compose_config(["+experiment=pipeline_after_bert", "comparison_budget=1M"], tmp_path)
    with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
        stages = check_stages(cfg, tmp_path, ["comparison_budget=1M"])  # every stage composes and validates
    recipes = {"crammed": "pretrain_crammed_tiny", "mosaicbert": "pretrain_mosaicbert_tiny",
               "modernbert": "pretrain_modernbert_tiny"}
    changes = {"glu": "+model.feed_forward=glu", "no_bias": "+model.dense_bias=false",
               "rotary": "+model.position_embedding_type=rotary", "alibi": "+model.position_embedding_type=alibi",
               "pre_ln": "+model.layer_norm_position=pre", "local_attention": "+model.local_attention=32",
               "mask_30": "data.masking.masked_lm_prob=0.3", "lamb": "optim=lamb"}
    assert list(stages) == ["bert", *recipes, *changes, "evaluate"]
    for name, command in stages.items():
        if name == "evaluate":
            continue
        assert "trainer.budget=1M" in command and "trainer.max_steps=-1" in command, name
        assert f"+experiment={recipes.get(name, 'pretrain_tiny')}" in command, name
        if name in changes:  # BERT's stage and one change (a stage is also named after itself)
            added = {o for o in set(command) - set(stages["bert"]) if not o.startswith("experiment_name=")}
            assert changes[name] in added and len(added) <= 2 and set(stages["bert"]) - set(command) <= {
                "experiment_name=pipeline_after_bert_bert"}, (name, added)
    evaluate = stages["evaluate"]
    assert f"scratch=scratch:{tmp_path / 'bert'}" in evaluate
    assert evaluate[evaluate.index("--seeds") + 1] == "3" and evaluate[evaluate.index("--tasks") + 1:][:2] == ["sst2", "cola"]


def test_a_shared_list_of_overrides_is_spliced_where_it_stands():
    from omegaconf import OmegaConf

    from bert_exp.runner.pipeline import spliced

    cfg = OmegaConf.create({"on_budget": ["trainer.budget=4M", "trainer.max_steps=-1"],
                            "overrides": ["${on_budget}", "+model.dense_bias=false"]})
    assert spliced(cfg.overrides) == ["trainer.budget=4M", "trainer.max_steps=-1", "+model.dense_bias=false"]
    assert spliced(None) == []
