"""The run's count of the training batches ``model.unpad`` ran on their real tokens alone."""

import torch

from bert_exp.model import BertConfig, BertForSequenceClassification
from bert_exp.runner.callbacks import UnpaddedBatches, unpad_note


def mask(lengths, width):
    return (torch.arange(width) < torch.tensor(lengths)[:, None]).long()


def test_auto_counts_the_batches_the_encoder_unpads_and_a_resume_counts_on():
    model = BertForSequenceClassification(BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                                     intermediate_size=64, unpad="auto"), num_labels=2)
    module = torch.nn.ModuleDict({"model": model})  # the task module holds the encoder somewhere inside
    counted = UnpaddedBatches("auto")
    counted.on_train_start(None, module)
    batches = [mask([8, 8, 8, 8], 8),  # no padding: padded
               mask([8, 2, 3, 8], 8),  # 47 % padding: unpadded
               mask([8, 8, 8, 7], 8)]  # 3 %: under auto's 10 %, padded
    for i, attention_mask in enumerate(batches):
        counted.on_train_batch_start(None, module, {"attention_mask": attention_mask}, i)
    assert counted.report() == {"setting": "auto", "training_batches": 3, "unpadded": 1}
    assert UnpaddedBatches.closing_line_of(counted.report()) == (
        "model.unpad=auto: 1 of 3 training batches ran on their real tokens alone, the rest padded")

    resumed = UnpaddedBatches("auto")
    resumed.on_train_start(None, module)
    resumed.load_state_dict(counted.state_dict())
    resumed.on_train_batch_start(None, module, {"attention_mask": batches[1]}, 3)
    assert resumed.report()["training_batches"] == 4 and resumed.report()["unpadded"] == 2


def test_the_first_lines_name_the_path():
    assert "10% padding" in unpad_note("auto")
    assert unpad_note(True).startswith("model.unpad=true")
    assert unpad_note(False) is None and unpad_note(None) is None
