"""Predictions equal transformers' pipelines (its model by hand where transformers 5 has no pipeline) on real inputs: models built from all-MiniLM-L6-v2 with a
random head, exported; 20 CoLA dev sentences (classification, tagging) and 20 SQuAD dev questions."""

import json
from functools import partial

import pytest
import torch
import transformers

from bert_exp import Predictor
from bert_exp.model.hf import Checkpoint, save_hf_directory
from bert_exp.resources import minilm_dir
from bert_exp.tasks import (
    ClassificationModule,
    QuestionAnsweringModule,
    TokenClassificationModule,
)
from bert_exp.tasks.checkpoints import load_checkpoint
from bert_exp.tasks import OptimSettings, Vocabulary

pytestmark = pytest.mark.data
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def exported(cls, out, **kw):
    ckpt = load_checkpoint(minilm_dir())
    module = cls(ckpt.config, optim=OptimSettings(partial(torch.optim.AdamW)), vocabulary=Vocabulary(ckpt.vocab), **kw)
    module.initialise_from(ckpt)
    torch.manual_seed(0)
    for name, param in module.model.named_parameters():  # the fresh head: make it non-trivial
        if name.startswith(module.head_prefixes):
            torch.nn.init.normal_(param, std=0.5)
    labels = kw.get("labels")
    save_hf_directory(Checkpoint(module.config, module.model.state_dict(), module.vocab, True, cls.head,
                                 kw.get("num_labels") or (len(labels) if labels else None), labels=labels), out)
    return out


@pytest.fixture(scope="module")
def cola(data_dir):
    lines = (data_dir / "cola" / "raw" / "in_domain_dev.tsv").read_text().splitlines()
    return [line.split("\t")[3] for line in lines[:20]]


def test_classification_equals_the_pipeline(tmp_path, cola):
    model = exported(ClassificationModule, tmp_path / "cls", num_labels=2)
    ours = Predictor(model, batch_size=8).classify(cola)
    pipe = transformers.pipeline("text-classification", model=str(model), device="cpu")
    theirs = pipe(cola, batch_size=8)
    assert [r["label"] for r in ours] == [r["label"] for r in theirs]
    assert [r["score"] for r in ours] == pytest.approx([r["score"] for r in theirs], abs=1e-4)
    spread = [r["probabilities"]["LABEL_1"] for r in ours]
    assert max(spread) - min(spread) > 0.01  # the inputs differ in what the model says of them


def test_question_answering_equals_the_pipeline(tmp_path, data_dir):
    data = json.loads((data_dir / "squad" / "dev-v1.1.json").read_text())["data"]
    pairs = [(qa["question"], p["context"]) for a in data[:3] for p in a["paragraphs"] for qa in p["qas"]
             if len(p["context"]) < 900][:20]  # one window each: the pipeline scores windows differently
    model = exported(QuestionAnsweringModule, tmp_path / "qa")
    # every candidate considered (as the pipeline does), not only the 20 best starts x ends
    ours = Predictor(model, n_best_size=512, max_answer_length=15).answer(*map(list, zip(*pairs)))
    # transformers 5 has no question-answering pipeline: its model and tokenizer, and the best span by hand
    tokenizer = transformers.BertTokenizerFast.from_pretrained(model)
    theirs = transformers.BertForQuestionAnswering.from_pretrained(model).eval()
    for (question, context), result in zip(pairs, ours):
        enc = tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
        offsets, in_context = enc.pop("offset_mapping")[0].tolist(), [s == 1 for s in enc.sequence_ids(0)]
        with torch.no_grad():
            out = theirs(**enc)
        start, end = out.start_logits[0].tolist(), out.end_logits[0].tolist()
        score, s, e = max((start[s] + end[e], s, e) for s in range(len(start)) for e in range(s, min(s + 15, len(end)))
                          if in_context[s] and in_context[e])
        assert (result["start"], result["end"]) == (offsets[s][0], offsets[e][1]), question
        assert result["answer"] == context[offsets[s][0]:offsets[e][1]]
        assert result["logit"] == pytest.approx(score, abs=1e-3)


def test_tagging_equals_the_pipeline_on_first_subtokens(tmp_path, cola):
    model = exported(TokenClassificationModule, tmp_path / "tag", labels=TAGS)
    ours = Predictor(model).tag(cola)
    pipe = transformers.pipeline("token-classification", model=str(model), device="cpu", aggregation_strategy="none")
    labelled = 0
    for text, result in zip(cola, ours):
        starts = {w["start"] for w in result["words"]}
        theirs = {(e["start"], e["entity"]) for e in pipe(text) if e["start"] in starts}
        assert {(w["start"], w["label"]) for w in result["words"] if w["label"] != "O"} == theirs, text
        labelled += len(theirs)
    assert labelled > 20
