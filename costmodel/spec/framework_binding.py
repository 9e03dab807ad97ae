"""The spec's framework, bound by the loader: what the cost model needs of the frameworks, handed to it as data.

``costmodel/`` imports nothing above it (issue 18). The framework profiles and their lookup by name and version live
in ``frameworks/`` (data in ``profile_data.py``, loading in ``loader.py``, as torchtitan keeps ``config/configs.py``
data apart from ``config/manager.py`` loading). A :class:`~parplan.costmodel.spec.spec.Spec` is validated with a
:class:`FrameworkLoader` in the pydantic validation context (``context={LOADER_KEY: loader}``):

* before the fields are validated, the loader merges the profile's memory conventions into ``assumptions:`` (the
  user's own values win), so a resolution error is reported as any spec error is;
* after, the loader's :class:`BoundFramework` (the spec's own profile, or None for ``framework: any``, and the
  profiles a plan is checked against for ``runs_on``) is kept on the Spec as plain data, and the spec's ``search:``
  pins are checked against its profile (:func:`~parplan.costmodel.spec.framework_rules.search_conflicts`).

A Spec validated without a loader is an error naming the loader: no answer depends on a lookup the cost model cannot
make. ``Spec.model_copy`` keeps the binding; a copy under another framework is the loader's (``retarget``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Protocol

from parplan.costmodel.spec.framework_rules import Profile, framework_violations, model_conflicts, search_conflicts

if TYPE_CHECKING:  # costmodel.spec.spec keeps a BoundFramework
    from parplan.costmodel.spec.spec import ModelSpec, Plan, SearchSpec, Spec

LOADER_KEY = "framework_loader"  # the key of the loader in the validation context


@dataclass(frozen=True)
class BoundFramework:
    """A spec's framework resolved to profiles: ``profile`` is the spec's own (None: ``framework: any``, the research
    space); ``runs_on_profiles`` are the (name, profiles) pairs a plan's ``runs_on`` is checked against, in order: a
    name is listed when every one of its profiles runs the plan (its export's version, and the spec's own)."""

    profile: Optional[Profile]
    runs_on_profiles: tuple[tuple[str, tuple[Profile, ...]], ...]

    def runs_on(self, plan: "Plan", among: Optional[tuple[str, ...]] = None,
                model: Optional["ModelSpec"] = None) -> list[str]:
        """The frameworks that can run ``plan`` (of ``model``, for the rules that depend on it); ``among``: only those
        of these names are checked (the list is then the full answer filtered to them, in the same order)."""
        return [name for name, profs in self.runs_on_profiles
                if (among is None or name in among) and not any(framework_violations(p, plan, model) for p in profs)]

    def search_conflicts(self, search: "SearchSpec") -> list[str]:
        """``search:`` pins that leave nothing the spec's framework can run (a spec error, naming the field)."""
        return [] if self.profile is None else search_conflicts(search, self.profile)

    def model_conflicts(self, model: "ModelSpec") -> list[str]:
        """What of ``model`` the spec's framework cannot build at all (a spec error, naming the field)."""
        return [] if self.profile is None else model_conflicts(model, self.profile)


class FrameworkLoader(Protocol):
    """What the loader hands the Spec's validators (frameworks/loader.py implements it)."""

    def apply_conventions(self, data: Any) -> Any:
        """Raw spec input (a dict, ``framework`` filled) -> the same with the profile's knobs under the user's."""

    def bind(self, framework: Any) -> BoundFramework:
        """The validated ``framework`` value (a name, ``any`` or a FrameworkSpec) resolved to profiles."""


class UnboundSpec(ValueError):
    """A Spec validated without the loader (its framework unresolved)."""


def loader_of(context: Any) -> FrameworkLoader:
    """The loader in a validation context, or :class:`UnboundSpec`."""
    loader = context.get(LOADER_KEY) if isinstance(context, dict) else None
    if loader is None:
        raise UnboundSpec("a Spec is validated by the loader, which resolves its framework: parplan.load_spec, "
                          "parplan.as_spec or parplan.frameworks.loader.validate_spec")
    return loader


def spec_profile(spec: "Spec") -> Optional[Profile]:
    """The profile a spec names, or None (framework-neutral: ``framework: any``)."""
    return spec.bound_framework.profile


def runs_on(spec: "Spec", plan: "Plan", among: Optional[tuple[str, ...]] = None) -> list[str]:
    """The frameworks that can run ``plan`` as their exports write it (each at its export's version, and the spec's
    own at its version too); ``among``: of these names only (:meth:`BoundFramework.runs_on`)."""
    return spec.bound_framework.runs_on(plan, among, spec.model)
