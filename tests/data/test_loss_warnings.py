"""The preparation's warnings about cut sentences stay a few lines however many files have them."""

import logging

from bert_exp.data.corpus.groups import CUT_WARNING_FILES, warn_about_losses


def test_the_files_with_the_longest_sentences_are_named_and_the_rest_counted(caplog):
    kept = {"tokens": 1000, "tokens_dropped": 100}
    files = {f"f{k}.txt": {"long_sentences": 3, "longest_sentence": 300 + k, **kept} for k in range(6)}
    files["short.txt"] = {"long_sentences": 1, "longest_sentence": 70, **kept}  # over an instance, not 4x: not named
    report = {"truncated_files": files, "long_sentences": 19}
    with caplog.at_level(logging.INFO, logger="bert_exp.data"):
        warn_about_losses(report, max_seq_length=64)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert CUT_WARNING_FILES == 3 and len(warnings) == 4
    assert [w.split(":")[0] for w in warnings[:3]] == ["f5.txt", "f4.txt", "f3.txt"]  # the longest first
    assert warnings[3] == "... and 3 more file(s) with a sentence over 244 tokens (run.json data_report.truncated_files)"
    assert any("19 sentence(s) in 7 file(s) are longer than an instance" in r.getMessage() for r in caplog.records)
