"""Search spaces: YAML files validated into `Space` objects that Optuna samples.

    space = load_space("gpu-collectives")      # or load_space("path/to/space.yaml")
    config = space.sample(trial)               # flag -> value, unset params left out
    study.enqueue_trial(space.recommended_params())

Importing this package does not import optuna; `Space.sample` receives a trial.
"""

from autotune.spaces.loader import list_spaces, load_space, load_space_text, spaces_dir
from autotune.spaces.params import UNSET, Param
from autotune.spaces.schema import SCHEMA_VERSION, parse_size
from autotune.spaces.space import GROUP_PREFIX, Group, GroupChoice, Space

__all__ = [
    "GROUP_PREFIX",
    "SCHEMA_VERSION",
    "UNSET",
    "Group",
    "GroupChoice",
    "Param",
    "Space",
    "list_spaces",
    "load_space",
    "load_space_text",
    "parse_size",
    "spaces_dir",
]
