"""A transformers ModernBERT directory (config.json, model.safetensors and a BPE tokenizer.json, as
answerdotai/ModernBERT-base is laid out; tiny and random here) fine-tunes CoLA through the CLI with
``task.init_from`` and ``model=from_checkpoint``, and the run exports back to a directory transformers'
AutoModelForSequenceClassification loads with our logits (slow: about 20 s on 2 cores)."""

import json

import pytest
import torch
import transformers
from helpers import run_cli

from bert_exp.data.tokenizer import train_byte_bpe
from bert_exp.model import BertForSequenceClassification
from bert_exp.tasks import OptimSettings, QuestionAnsweringModule, TokenClassificationModule
from bert_exp.tasks.checkpoints import checkpoint_config, load_checkpoint
from bert_exp.tools.export import main as export_main
from bert_exp.tools.predict import Predictor
from bert_exp.tools.score import main as score_main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def modernbert_dir(data_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("modernbert")
    lines = (data_dir / "cola" / "raw" / "in_domain_train.tsv").read_text(encoding="utf-8").splitlines()
    tokenizer = train_byte_bpe((line.split("\t")[3] for line in lines), vocab_size=600)
    tokenizer.save(str(path / "tokenizer.json"))
    ids = {t: tokenizer.token_to_id(t) for t in ("[PAD]", "[CLS]", "[SEP]")}
    config = transformers.ModernBertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
        intermediate_size=48, max_position_embeddings=128, local_attention=16, pad_token_id=ids["[PAD]"],
        cls_token_id=ids["[CLS]"], bos_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"], eos_token_id=ids["[SEP]"])
    torch.manual_seed(0)
    transformers.ModernBertForMaskedLM(config).save_pretrained(path)
    return path


def test_cola_fine_tunes_from_a_modernbert_directory_and_exports_back(modernbert_dir, data_dir, cache_dir, tmp_path):
    env = {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir), "BERT_EXP_OUTPUTS": str(tmp_path)}
    run_dir = tmp_path / "run"
    result = run_cli(["+experiment=cola_tiny", f"task.init_from={modernbert_dir}", "model=from_checkpoint",
                      "trainer.max_steps=4", "trainer.limit_val_batches=2", "logger=csv", f"hydra.run.dir={run_dir}"],
                     env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["initialised_from"] == str(modernbert_dir)
    # ModernBERT's masked-LM head is left behind; the task's transform and classifier start fresh
    assert sorted(info["fresh_parameters"]) == ["classifier.bias", "classifier.weight", "head.LayerNorm.weight",
                                                "head.dense.weight"]
    ckpt = load_checkpoint(run_dir)
    assert ckpt.config.position_embedding_type == "rotary" and ckpt.config.classifier_head == "transform"
    assert json.loads(ckpt.tokenizer) == json.loads((modernbert_dir / "tokenizer.json").read_text())
    assert ckpt.lowercase is False  # a BPE tokenizer.json keeps its own case
    out = tmp_path / "hf"
    assert export_main([str(run_dir), str(out)]) == 0
    theirs, loading = transformers.AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert type(theirs) is transformers.ModernBertForSequenceClassification
    assert not loading["missing_keys"] and not loading["unexpected_keys"], loading
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    batch = tokenizer(["The cat sat on the mat.", "Mat the on."], padding=True, return_tensors="pt")
    ours = BertForSequenceClassification(ckpt.config, num_labels=2).eval()
    ours.load_state_dict(ckpt.state_dict, strict=False)
    with torch.no_grad():
        expected = ours(batch["input_ids"], None, batch["attention_mask"])
        torch.testing.assert_close(theirs.eval()(input_ids=batch["input_ids"],
                                                 attention_mask=batch["attention_mask"]).logits, expected,
                                   atol=1e-5, rtol=1e-5)

    # predict and score work on the run
    (prediction,) = Predictor(run_dir, device="cpu").classify(["The cat sat on the mat."])
    assert prediction["label"] in prediction["probabilities"] and len(prediction["probabilities"]) == 2
    assert score_main([str(run_dir)]) == 0


@pytest.mark.parametrize("module_cls, head", [(QuestionAnsweringModule, ["qa_outputs."]),
                                              (TokenClassificationModule, ["classifier."])])
def test_squad_and_tagging_start_from_a_modernbert_directory(modernbert_dir, module_cls, head):
    config = checkpoint_config(modernbert_dir)  # model=from_checkpoint: the shape alone
    extra = {"labels": ["O", "B-PER", "I-PER"]} if module_cls is TokenClassificationModule else {}
    module = module_cls(config, optim=OptimSettings(torch.optim.AdamW), **extra)
    module.initialise_from(load_checkpoint(modernbert_dir))
    # the encoder is ModernBERT's; the span or tag head and its transform start fresh
    assert sorted({name.rsplit(".", 1)[0] + "." for name in module.fresh_parameters}) == sorted(
        head + ["head.LayerNorm.", "head.dense."])
