"""Training orders: length-grouped batches with far less padding, sharded across processes, resumable
mid-epoch; evaluation shards that see every example once."""

import pytest
import torch

from bert_exp.data import LoaderSettings
from bert_exp.data.tasks.glue import read_examples
from bert_exp.data.sampling import EvaluationSampler, TrainingSampler


def padding(order, lengths, batch_size):
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return sum(len(b) * max(lengths[j] for j in b) - sum(lengths[j] for j in b) for b in batches)


def test_grouped_batches_cover_every_example_and_cut_padding(data_dir):
    examples = read_examples(str(data_dir / "cola" / "raw" / "in_domain_train.tsv"), [3], 1, 2, 4, False)
    lengths = [len(e.texts[0].split()) + 2 for e in examples]
    sampler = TrainingSampler(lengths, batch_size=32, seed=1, group_by_length=True)
    grouped = list(sampler)
    assert sorted(grouped) == list(range(len(lengths)))
    random_order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(1)).tolist()
    assert padding(grouped, lengths, 32) < padding(random_order, lengths, 32) / 4

    sampler.set_epoch(1)
    assert list(sampler) != grouped  # a new order each epoch
    sampler.set_epoch(0)
    assert list(sampler) == grouped  # and the same order for the same epoch and seed


def test_glue_datamodule_groups_by_length_when_asked(data_dir):
    from bert_exp.data.tasks.glue import GlueDataModule
    from bert_exp.resources import minilm_dir

    cola = data_dir / "cola" / "raw"
    dm = GlueDataModule(str(cola / "in_domain_train.tsv"), {"dev": str(cola / "in_domain_dev.tsv")}, text_columns=[3],
                        label_column=1, num_columns=4, vocab_file=str(minilm_dir() / "vocab.txt"),
                        loader=LoaderSettings(batch_size=32, group_by_length=True), seed=3)
    dm.setup()
    loader = dm.train_dataloader()
    assert isinstance(loader.sampler, TrainingSampler) and loader.sampler.group_by_length
    widths = [batch["input_ids"].shape[1] for batch, _ in zip(loader, range(20))]
    padded = sum(32 * w for w in widths)
    real = sum(int(batch["attention_mask"].sum()) for batch, _ in zip(loader, range(20)))
    assert real / padded > 0.9  # near-uniform lengths in every batch


def batches_of(sampler, batch_size):
    order = list(sampler)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@pytest.mark.parametrize("group_by_length", [False, True])
def test_shards_split_each_global_step_between_ranks(group_by_length):
    lengths = torch.randint(5, 100, (101,), generator=torch.Generator().manual_seed(0)).tolist()
    single = batches_of(TrainingSampler(lengths, 16, seed=4, group_by_length=group_by_length), 16)
    ranks = [batches_of(TrainingSampler(lengths, 8, seed=4, group_by_length=group_by_length, world_size=2,
                                        rank=r), 8) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 7  # equal batch counts: the last step padded
    for step, (a, b) in enumerate(zip(*ranks)):
        if step < 6:  # a rank's batch is its half of the one-process batch of the global size
            assert sorted(a + b) == sorted(single[step])
    covered = {i for r in ranks for batch in r for i in batch}
    assert covered == set(range(101))
    if group_by_length:
        spread = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in ranks[0][:6]]
        assert sum(spread) / len(spread) < 30  # like lengths within each rank's batch


def test_a_resumed_sampler_continues_the_interrupted_order():
    sampler = TrainingSampler(50, 4, seed=2, world_size=1)
    sampler.set_epoch(3)
    full = list(sampler)
    resumed = TrainingSampler(50, 4, seed=2, world_size=1)
    resumed.resume_at(3, 5)
    assert list(resumed) == full[20:]
    assert list(resumed) == full  # skipping applies to the resumed epoch only
    at_end = TrainingSampler(50, 4, seed=2, world_size=1)
    at_end.resume_at(2, 13)  # 13 batches is the whole of epoch 2: go on with epoch 3
    assert at_end.epoch == 3 and list(at_end) == full


def test_epoch_tags_and_drop_last():
    sampler = TrainingSampler(10, 4, seed=0, tag_epoch=True, drop_last=True)
    sampler.set_epoch(2)
    order = list(sampler)
    assert len(order) == len(sampler) == 8 and all(20 <= i < 30 for i in order)


def test_evaluation_shards_see_every_example_once():
    shards = [list(EvaluationSampler(11, world_size=3, rank=r)) for r in range(3)]
    assert sorted(i for shard in shards for i in shard) == list(range(11))
