"""Length-grouped batches: the same examples, in a random order, with far less padding."""

import torch

from bert_exp.data.glue import read_tsv
from bert_exp.data.sampling import LengthGroupedSampler


def padding(order, lengths, batch_size):
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return sum(len(b) * max(lengths[j] for j in b) - sum(lengths[j] for j in b) for b in batches)


def test_grouped_batches_cover_every_example_and_cut_padding(data_dir):
    examples = read_tsv(str(data_dir / "cola" / "raw" / "in_domain_train.tsv"), [3], 1, 2, 4, False)
    lengths = [len(e.texts[0].split()) + 2 for e in examples]
    sampler = LengthGroupedSampler(lengths, batch_size=32, seed=1)
    grouped = list(sampler)
    assert sorted(grouped) == list(range(len(lengths)))
    random_order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(1)).tolist()
    assert padding(grouped, lengths, 32) < padding(random_order, lengths, 32) / 4

    sampler.set_epoch(1)
    assert list(sampler) != grouped  # a new order each epoch
    sampler.set_epoch(0)
    assert list(sampler) == grouped  # and the same order for the same epoch and seed


def test_glue_datamodule_groups_by_length_when_asked(data_dir):
    from bert_exp.data.glue import GlueDataModule
    from bert_exp.resolvers import _minilm_dir

    cola = data_dir / "cola" / "raw"
    dm = GlueDataModule(str(cola / "in_domain_train.tsv"), {"dev": str(cola / "in_domain_dev.tsv")}, text_columns=[3],
                        label_column=1, num_columns=4, vocab_file=_minilm_dir() + "/vocab.txt", batch_size=32,
                        group_by_length=True, seed=3)
    dm.setup()
    loader = dm.train_dataloader()
    assert isinstance(loader.sampler, LengthGroupedSampler)
    widths = [batch["input_ids"].shape[1] for batch, _ in zip(loader, range(20))]
    padded = sum(32 * w for w in widths)
    real = sum(int(batch["attention_mask"].sum()) for batch, _ in zip(loader, range(20)))
    assert real / padded > 0.9  # near-uniform lengths in every batch
