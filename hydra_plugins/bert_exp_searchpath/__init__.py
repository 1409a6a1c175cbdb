"""Puts bert_exp's sweeps/ on Hydra's search path: ``+sweeps=NAME`` selects ``sweeps/NAME.yaml``
(from a checkout, or from the copy packaged in the wheel), and after it the user's config directories of
``$BERT_EXP_CONFIG_PATH`` (bert_exp/runner/config_search.py). It also stores the settings nodes that the
presets' defaults lists name (bert_exp/runner/settings_store.py): Hydra calls this before every
composition, from the command line, tests and tools alike."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class BertExpSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from bert_exp.resources import resource_dir
        from bert_exp.runner.config_search import environment_roots
        from bert_exp.runner.settings_store import register_settings

        register_settings()

        try:
            sweeps = resource_dir("sweeps")
        except FileNotFoundError:
            sweeps = None
        if sweeps is not None:  # the parent of sweeps/ as a config root makes `sweeps` a config group
            search_path.append(provider="bert_exp-sweeps", path=f"file://{sweeps.parent}")
        for root in environment_roots():
            search_path.append(provider="bert_exp-user", path=f"file://{root}")
