"""Writes a trained tagger's word predictions on a validation set, gold<TAB>predicted per word and a blank
line between sentences: the golden data of tests/tasks/test_tagging_module.py.

    python tests/tasks/golden/dump_predictions.py RUN_DIR dev tests/tasks/golden/wnut17_dev_predictions.tsv
"""
import json
import sys
from pathlib import Path

import torch

from bert_exp.data.tasks import TaggingDataModule
from bert_exp.data import LoaderSettings
from bert_exp.tasks.checkpoints import load_checkpoint
from bert_exp.tools.predict import build_model

run, split, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
cfg = json.loads((run / "run.json").read_text())["config"]["data"]
ckpt = load_checkpoint(run)
dm = TaggingDataModule(cfg["train_file"], cfg["val_files"], format=cfg["format"], label_column=cfg["label_column"],
                       max_seq_length=cfg["max_seq_length"], window_context=cfg["window_context"],
                       loader=LoaderSettings(eval_batch_size=64))
dm.use_vocabulary(ckpt.vocab)
dm.setup()
assert dm.labels == ckpt.labels, (dm.labels, ckpt.labels)
model = build_model(ckpt)
preds = {}
with torch.no_grad():
    for batch in torch.utils.data.DataLoader(dm.datasets[split], batch_size=64, collate_fn=dm.collate):
        logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        p = logits.argmax(-1)
        scored = batch["word_index"] >= 0
        rows = scored.nonzero(as_tuple=True)[0]
        for s, w, y in zip(batch["sentence"][rows].tolist(), batch["word_index"][scored].tolist(), p[scored].tolist()):
            preds[(s, w)] = ckpt.labels[y]
gold = dm.gold(split)
lines = []
for i, sentence in enumerate(gold):
    for j, g in enumerate(sentence):
        lines.append(f"{g}\t{preds[(i, j)]}")
    lines.append("")
out.write_text("\n".join(lines))
print(len(gold), "sentences", sum(map(len, gold)), "words")
