"""Loading a spec: the framework it names resolved to profiles, and handed to the cost model as data.

As torchtitan keeps its config data (``config/configs.py``) apart from loading (``config/manager.py``), the profiles
are data (:mod:`~parplan.frameworks.profile_data`, picked by version in :mod:`~parplan.frameworks.profiles`) and this
module loads them into a :class:`~parplan.costmodel.spec.Spec`: :func:`validate_spec` validates raw spec data with
:data:`LOADER` in the validation context, which fills the default framework's (or the named one's) memory
conventions under the user's ``assumptions:`` and binds the resolved profiles to the Spec
(:class:`~parplan.costmodel.framework_binding.BoundFramework`). The cost model reads only that binding, so
``costmodel/`` imports nothing above it. Every entry point that builds a Spec (``parplan.load_spec`` / ``as_spec``,
the CLI, the service, sweeps, imports, benchmarks) goes through :func:`validate_spec`.
"""

from __future__ import annotations

from typing import Any, Union

from parplan.costmodel.framework_binding import LOADER_KEY, BoundFramework
from parplan.costmodel.spec import FrameworkSpec, Spec
from parplan.frameworks.profile_citations import FRAMEWORKS
from parplan.frameworks.profiles import apply_framework_assumptions, framework_profile, profile


class ProfileLoader:
    """The :class:`~parplan.costmodel.framework_binding.FrameworkLoader` of the profiles in frameworks/."""

    def apply_conventions(self, data: Any) -> Any:
        return apply_framework_assumptions(data)

    def bind(self, framework: Union[str, FrameworkSpec, None]) -> BoundFramework:
        """The spec's own profile (None under ``any``) and the profiles ``runs_on`` checks: the newest of each
        framework (:data:`~parplan.frameworks.profile_citations.FRAMEWORKS`), the spec's own at its version, and a
        historical framework only when the spec names it."""
        mine = framework_profile(framework)
        names = FRAMEWORKS if mine is None or mine.name in FRAMEWORKS else FRAMEWORKS + (mine.name,)
        return BoundFramework(mine, tuple((name, mine if mine is not None and mine.name == name else profile(name))
                                          for name in names))


LOADER = ProfileLoader()
CONTEXT = {LOADER_KEY: LOADER}


def validate_spec(data: Any) -> Spec:
    """``Spec.model_validate`` with the framework resolved (raises pydantic's ``ValidationError`` as it does)."""
    return Spec.model_validate(data, context=CONTEXT)


def retarget(spec: Spec, framework: Union[str, FrameworkSpec]) -> Spec:
    """``spec`` with the rules of ``framework`` (a name, ``any`` or a FrameworkSpec) and its own ``assumptions:``
    kept as they are (a copy, not a re-validation: ``frameworks/compare.py`` re-validates under each framework)."""
    copy = spec.model_copy(update={"framework": framework})
    copy._bound = LOADER.bind(framework)
    return copy
