"""Loading a spec: the framework it names resolved to profiles, and handed to the cost model as data.

As torchtitan keeps its config data (``config/configs.py``) apart from loading (``config/manager.py``), the profiles
are data (:mod:`~parplan.frameworks.profile_data`, picked by version in :mod:`~parplan.frameworks.profiles`) and this
module loads them into a :class:`~parplan.costmodel.spec.spec.Spec`: :func:`validate_spec` validates raw spec data with
:data:`LOADER` in the validation context, which fills the default framework's (or the named one's) memory
conventions under the user's ``assumptions:`` and binds the resolved profiles to the Spec
(:class:`~parplan.costmodel.spec.framework_binding.BoundFramework`). The cost model reads only that binding, so
``costmodel/`` imports nothing above it. Every entry point that builds a Spec (``parplan.load_spec`` / ``as_spec``,
the CLI, the service, sweeps, imports, benchmarks) goes through :func:`validate_spec`.
"""

from __future__ import annotations

from typing import Any, Union

from parplan.costmodel.spec.framework_binding import LOADER_KEY, BoundFramework
from parplan.costmodel.spec.spec import FrameworkSpec, Spec
from parplan.frameworks.profile_citations import FRAMEWORKS
from parplan.frameworks.profiles import apply_framework_assumptions, export_profile, framework_profile


class ProfileLoader:
    """The :class:`~parplan.costmodel.spec.framework_binding.FrameworkLoader` of the profiles in frameworks/."""

    def apply_conventions(self, data: Any) -> Any:
        return apply_framework_assumptions(data)

    def bind(self, framework: Union[str, FrameworkSpec, None]) -> BoundFramework:
        """The spec's own profile (None under ``any``) and the profiles ``runs_on`` checks: each exported framework
        (:data:`~parplan.frameworks.profile_citations.FRAMEWORKS`) at the version its export writes for
        (:func:`~parplan.frameworks.profiles.export_profile`), so a plan listed for it is one its export writes
        unchanged; where the spec names that framework at another version, that version's rules too (the plan must
        run on the version the user runs, and the export must write it); a historical framework only when the spec
        names it, by its own profile."""
        mine = framework_profile(framework)
        pairs = [(name, (export_profile(name),)) for name in FRAMEWORKS]
        if mine is not None and mine.name in FRAMEWORKS:
            pairs = [(name, profs if name != mine.name or mine in profs else profs + (mine,)) for name, profs in pairs]
        elif mine is not None:
            pairs.append((mine.name, (mine,)))
        return BoundFramework(mine, tuple(pairs))


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
