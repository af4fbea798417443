"""The verifiers taskset of gemkit envs, under the top-level name verifiers imports.

verifiers finds a taskset by importing the module its id names (`gemkit-verifiers` ->
`gemkit_verifiers`), which must be a top-level module: this one re-exports
`gemkit.integrations.verifiers`. `vf-eval gemkit-verifiers --env.taskset.env-id ID`.
"""

from gemkit.integrations.verifiers import *  # noqa: F403
from gemkit.integrations.verifiers import __all__  # noqa: F401
