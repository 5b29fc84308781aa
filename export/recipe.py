"""The edit recipe a bundle ships: the ZO search and the success rule (manifest ``recipe``).

One definition: the shipped recipe, :data:`mobiedit.recipes.FZOO` (also the default of
:class:`mobiedit.methods.mobiedit.MobiEditConfig`: its ``zo``, ``success_fraction`` and
``success_nll``), with ``n_dirs`` fitted to the edit programs' static K (FZOO: K − 1 directions,
one program call per step); ``mobiedit export --recipe fzoo-grad`` ships
:data:`mobiedit.recipes.FZOO_GRADIENT` instead (:data:`mobiedit.recipes.BUNDLE_RECIPES`). The exporter writes it
into the manifest (:func:`shipped_recipe` → :meth:`Recipe.as_manifest`); every host edits with
the manifest's recipe (:func:`recipe_of`): ``mobiedit edit --bundle``, :mod:`.quality`, the app.

Manifest form (docs/bundle_format.md)::

    "recipe": {"zo": {every ZOConfig field but max_norm; "directions", "normalise", "check_at" optional},
               "success": {"fraction": 0.75, "nll": 0.5, "stop_on": "written"},
               "ladder": {"fractions": [0.5, 0.75, 1.0], "from_edits": 2},
               "settle": {"rounds": 0, "shrink": 0.8, "steps": 20}}

``success.stop_on`` (optional; absent in bundles exported before session 16: ``"loop"``): what
stops the search (:data:`mobiedit.recipes.STOP_ON`). ``"loop"``: the success rule on the edit
program at the searched delta (the delta added at every rewrite row). ``"written"``: where that rule passes, the
delta's rank-one factors are put in a free slot and the bundle rechecked
(:func:`~mobiedit.export.verify.written_holds`, two program calls); the search goes on unless the
written edit holds (the driver's ``confirm``, :func:`mobiedit.driver.search_value`). The written
edit reaches each template's row through its own key (δ·wᵀk_i, not δ), so a delta that barely
meets the rule on the edit program can miss it once written; ``"written"`` never stops there.

``ladder`` (optional; absent in bundles exported before session 15: :mod:`mobiedit.ladder`'s
defaults): the clamp ladder (:func:`mobiedit.ladder.climb`) — an edit that leaves at least
``from_edits`` edits on the bundle tries its value change clamped to each fraction of
``edit.objective.clamp_norm_factor`` in turn, smallest first, and keeps the first whose written
edit holds; ``fractions: [1.0]`` turns it off.

``settle`` (optional; absent in bundles exported before session 47: off): the search's settle
phase after its first success (:class:`mobiedit.recipes.Settle`, :func:`mobiedit.driver.settle_value`)
— up to ``rounds`` times the kept delta is shrunk by ``shrink`` and searched again for at most
``steps`` steps under the same rule and stop, and kept only if it passes and is shorter; ``rounds`` 0:
off. A model profile's ``settle`` section reaches the manifest through :func:`with_settle`, its
forward-only search's estimator settings (``methods.mobiedit.zo``) through :func:`with_search`.

``max_norm`` is not part of it: hosts clamp ``‖z‖`` to ``edit.objective.clamp_norm_factor · √d``.
Bundles exported before the recipe was written (same ``format_version`` 1) have no ``recipe``;
they are edited with :func:`shipped_recipe` of their ``shapes.edit_K``.
:func:`check_recipe` (called by :func:`~mobiedit.export.bundle.read_manifest`) refuses a
malformed recipe with a :class:`BundleError` naming the field ``recipe.…`` and a fix; the
manifest check (:mod:`.manifest_check`) also bounds the search's buffer (K · d_out floats).
"""
from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

from mobiedit.editing.config import check_ladder
from mobiedit.errors import BundleError, ConfigError
from mobiedit.ladder import LADDER_FROM_EDITS, SEQUENTIAL_LADDER
from mobiedit.profile import search_settings, settle_settings, success_settings
from mobiedit.recipes import BUNDLE_RECIPES, Settle, bundle_recipe, check_fraction, check_nll, check_stop_on
from mobiedit.zo import ZOConfig

log = logging.getLogger(__name__)

#: ZOConfig fields a recipe must carry, in ZOConfig's order (max_norm comes from the objective)
ZO_OPTIONAL = ("directions", "normalise", "check_at")  # written by this exporter; absent in older bundles
                                                       # (then "iid", "spread", "update")
ZO_FIELDS = tuple(f.name for f in dataclasses.fields(ZOConfig)
                  if f.name != "max_norm" and f.name not in ZO_OPTIONAL)
_KIND = {f.name: str(f.type) for f in dataclasses.fields(ZOConfig)}  # "str" / "int" / "float"
SUCCESS_FIELDS = ("fraction", "nll")
SETTLE_FIELDS = tuple(f.name for f in dataclasses.fields(Settle))

LADDER_FIELDS = ("fractions", "from_edits")
MAX_RUNGS = 8  # a ladder's rungs at most (each rung is a whole search)
MAX_SEED = 2**63 - 1  # every host holds the seed in a signed 64-bit integer (Java's long)
FIX = "re-export the bundle with `mobiedit export` (it writes the shipped recipe)"


@dataclass(frozen=True)
class Recipe:
    """How a bundle's edits are searched (``zo``) and judged (``success_fraction``,
    ``success_nll``: :func:`mobiedit.editing.objective.edit_holds` plus the loss margin), and when
    an edit climbs the clamp ladder (``ladder``: fractions of the objective's clamp, smallest
    first; ``ladder_from_edits``: from how many edits on the bundle, its own included).
    ``from_manifest``: False when the manifest had no recipe (the shipped one was used).
    ``stop_on``: one of :data:`mobiedit.recipes.STOP_ON` (the module docstring). ``settle``: the
    search's settle phase (off by default)."""

    zo: ZOConfig
    success_fraction: float
    success_nll: float
    from_manifest: bool = True
    ladder: tuple[float, ...] = SEQUENTIAL_LADDER
    ladder_from_edits: int = LADDER_FROM_EDITS
    stop_on: str = "loop"
    settle: Settle = Settle()

    def __post_init__(self) -> None:
        check_stop_on(self.stop_on, "Recipe.stop_on")
        if not isinstance(self.settle, Settle):
            raise ConfigError(f"settle is a {type(self.settle).__name__}, expected Settle", where="Recipe.settle",
                              fix="build it with mobiedit.recipes.Settle(...)")

    def as_manifest(self) -> dict:
        """The manifest's ``recipe`` object."""
        zo = self.zo.as_dict()
        return {"zo": {k: zo[k] for k in ZO_FIELDS + ZO_OPTIONAL},
                "success": {"fraction": self.success_fraction, "nll": self.success_nll, "stop_on": self.stop_on},
                "ladder": {"fractions": list(self.ladder), "from_edits": self.ladder_from_edits},
                "settle": dataclasses.asdict(self.settle)}


def shipped_recipe(K: int, name: str = "fzoo") -> Recipe:
    """The recipe ``name`` (:data:`mobiedit.recipes.BUNDLE_RECIPES`; default the shipped
    :data:`mobiedit.recipes.FZOO`) for edit programs of static batch ``K`` (``shapes.edit_K``): its
    search with ``n_dirs = max(1, K − 1)`` (FZOO's rows: one program call per step) checked at the
    step's own row 0 (``check_at`` ``"base"``: the program's batch is static, so a check of its own
    costs a whole program call, while the step's row 0 is the point the check asks about), and its
    success rule, stopped where the written edit holds (``stop_on`` ``"written"``)."""
    base = bundle_recipe(name, "recipe")
    fzoo = base.zo.estimator == "fzoo"
    zo = dataclasses.replace(base.zo, n_dirs=max(1, K - 1) if fzoo else base.zo.n_dirs,
                             check_at="base" if fzoo else base.zo.check_at)
    return Recipe(zo, base.success.fraction, base.success.nll, stop_on=base.success.stop_on, settle=base.settle)


def with_success(recipe: Recipe, success: dict) -> Recipe:
    """``recipe`` with a model profile's success rule (:func:`mobiedit.profile.success_settings`:
    ``nll`` and/or ``fraction``) in place of the shipped one; the manifest then carries it."""
    return dataclasses.replace(recipe, success_nll=success.get("nll", recipe.success_nll),
                               success_fraction=success.get("fraction", recipe.success_fraction))


def with_search(recipe: Recipe, zo: dict) -> Recipe:
    """``recipe`` with a model profile's estimator settings (:func:`mobiedit.profile.search_settings`:
    :class:`~mobiedit.zo.ZOConfig` fields, e.g. ``{"lr": 2, "h": 0.2}``) merged over its search; the
    manifest then carries them. The bundle's static edit batch fixes ``n_dirs`` (FZOO: K − 1): a
    profile asking for another count is refused with the export flag that gives it."""
    if not zo:
        return recipe
    from mobiedit.config_io import merge

    for key in ("estimator", "directions", "normalise"):  # what --recipe chooses among the hosts' searches
        if key in zo and zo[key] != getattr(recipe.zo, key):
            raise ConfigError(f"the profile's search sets {key} {str(zo[key])[:40]!r}, the bundle's recipe has "
                              f"{getattr(recipe.zo, key)!r}", where=f"mobiedit.json, field 'methods.mobiedit.zo.{key}'",
                              fix="choose the bundle's search with `mobiedit export --recipe NAME` "
                                  f"({', '.join(BUNDLE_RECIPES)}); the profile may set its lr, h, steps and budget")
    if "n_dirs" in zo and zo["n_dirs"] != recipe.zo.n_dirs:
        raise ConfigError(f"the profile's search uses {zo['n_dirs']} directions, this bundle's edit programs "
                          f"{recipe.zo.n_dirs}", where="mobiedit.json, field 'methods.mobiedit.zo.n_dirs'",
                          fix=f"export with --edit-k {zo['n_dirs'] + 1} (FZOO: one row per direction plus the base)")
    try:
        searched = merge(recipe.zo, {k: v for k, v in zo.items() if k != "check_at"},
                         "mobiedit.json, field 'methods.mobiedit.zo'")
    except ConfigError as e:  # ZOConfig's own check names ZOConfig.<field>: name the profile's
        name = _zo_field(e)
        raise ConfigError(e.message, where="mobiedit.json, field 'methods.mobiedit.zo"
                          + (f".{name}'" if name else "'"), fix=e.fix) from None
    return dataclasses.replace(recipe, zo=searched)


def _zo_field(e: ConfigError) -> str | None:
    """The :class:`ZOConfig` field a config error names (``ZOConfig.<field>``), or None."""
    name = (e.where or "").rpartition(".")[2]
    return name if name in ZO_FIELDS + ZO_OPTIONAL else None


def model_recipe(model_dir, K: int, name: str = "fzoo") -> Recipe:
    """The recipe a bundle of ``model_dir`` ships: :func:`shipped_recipe` ``(K, name)`` with the model
    profile's search (:func:`with_search`), success rule (:func:`with_success`) and settle phase
    (:func:`with_settle`). The exporter writes it; its export check perturbs at its ``zo.h``."""
    return with_settle(with_success(with_search(shipped_recipe(K, name), search_settings(model_dir)),
                                    success_settings(model_dir)), settle_settings(model_dir))


def with_settle(recipe: Recipe, settle: dict) -> Recipe:
    """``recipe`` with a model profile's settle phase (:func:`mobiedit.profile.settle_settings`,
    :class:`~mobiedit.recipes.Settle` fields merged over the recipe's); the manifest then carries it."""
    return dataclasses.replace(recipe, settle=dataclasses.replace(recipe.settle, **settle)) if settle else recipe


def recipe_of(manifest: dict) -> Recipe:
    """The recipe of a manifest :func:`~mobiedit.export.bundle.read_manifest` accepted: its
    ``recipe``, or :func:`shipped_recipe` of ``shapes.edit_K`` when it has none (a bundle
    exported before the recipe was written)."""
    if "recipe" not in manifest:
        log.info("the bundle's manifest has no recipe (exported before it was written): using the shipped one")
        return dataclasses.replace(shipped_recipe(manifest["shapes"]["edit_K"]), from_manifest=False)
    return check_recipe(manifest["recipe"], "manifest.json")


def _fail(where: str, field: str, msg: str, fix: str = FIX) -> BundleError:
    return BundleError(msg[:300], where=f"{where}, field '{field}'"[:400], fix=fix)


def _section(value, where: str, field: str, names: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    """``value`` as a JSON object with exactly the keys ``names`` (and any of ``optional``)."""
    if not isinstance(value, dict):
        raise _fail(where, field, f"must be a JSON object, got {type(value).__name__}")
    for key in value:
        if key not in names + optional:
            raise _fail(where, f"{field}.{str(key)[:40]}", "unknown field",
                        fix=f"use only {', '.join(names + optional)} (or upgrade mobiedit if a newer exporter wrote it)")
    for key in names:
        if key not in value:
            raise _fail(where, f"{field}.{key}", "missing field")
    return value


def _number(value, where: str, field: str, integer: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise _fail(where, field, f"must be {'an integer' if integer else 'a number'}, got {type(value).__name__}")
    if not integer:
        try:
            finite = math.isfinite(float(value))
        except OverflowError:  # an integer past float's range
            finite = False
        if not finite:
            raise _fail(where, field, "must be a finite number")


def check_recipe(raw, where: str) -> Recipe:
    """Validate a manifest's ``recipe`` and return it (``where``: the manifest's path).

    Every problem is a :class:`BundleError` naming ``recipe.zo.<field>`` / ``recipe.success.<field>``:
    unknown or missing fields, wrong types, values :class:`ZOConfig` refuses, a seed past 2^63 − 1.
    (The size of the directions' buffer is checked with the other buffers, in :mod:`.manifest_check`.)"""
    r = _section(raw, where, "recipe", ("zo", "success"), optional=("ladder", "settle"))
    zo_raw = _section(r["zo"], where, "recipe.zo", ZO_FIELDS, optional=ZO_OPTIONAL)
    for key in zo_raw:
        value = zo_raw[key]
        if _KIND[key] == "str":
            if not isinstance(value, str):
                raise _fail(where, f"recipe.zo.{key}", f"must be text, got {type(value).__name__}")
        else:
            _number(value, where, f"recipe.zo.{key}", _KIND[key] == "int")
    try:
        zo = ZOConfig(**zo_raw)
    except ConfigError as e:  # names the ZOConfig field: ZOConfig.<name>
        name = _zo_field(e)
        raise _fail(where, f"recipe.zo.{name}" if name else "recipe.zo", e.message, fix=e.fix or FIX) from None
    if zo.seed > MAX_SEED:
        raise _fail(where, "recipe.zo.seed", f"{zo.seed} does not fit a signed 64-bit integer",
                    fix=f"use a seed in [0, {MAX_SEED}]")
    s = _section(r["success"], where, "recipe.success", SUCCESS_FIELDS, optional=("stop_on",))
    for key in SUCCESS_FIELDS:
        _number(s[key], where, f"recipe.success.{key}", False)
    for key, check in (("fraction", check_fraction), ("nll", check_nll)):  # the rule of recipes.SuccessCriterion
        try:
            check(s[key], f"recipe.success.{key}")
        except ConfigError as e:
            raise _fail(where, f"recipe.success.{key}", e.message, fix=e.fix or FIX) from None
    stop_on = s.get("stop_on", "loop")
    try:
        check_stop_on(stop_on, "recipe.success.stop_on")
    except ConfigError as e:
        raise _fail(where, "recipe.success.stop_on", e.message, fix=e.fix) from None
    ladder, from_edits = _ladder(r["ladder"], where) if "ladder" in r else (SEQUENTIAL_LADDER, LADDER_FROM_EDITS)
    settle = _settle(r["settle"], where) if "settle" in r else Settle()
    return Recipe(zo, float(s["fraction"]), float(s["nll"]), ladder=ladder, ladder_from_edits=from_edits,
                  stop_on=stop_on, settle=settle)


def _settle(raw, where: str) -> Settle:
    """A recipe's ``settle``: exactly :data:`SETTLE_FIELDS`, ``rounds``/``steps`` integers and
    ``shrink`` a number in the ranges :class:`~mobiedit.recipes.Settle` accepts."""
    s = _section(raw, where, "recipe.settle", SETTLE_FIELDS)
    for key in SETTLE_FIELDS:
        _number(s[key], where, f"recipe.settle.{key}", key != "shrink")
    try:
        return Settle(**s)
    except ConfigError as e:  # names the field: settle.<name>
        raise _fail(where, f"recipe.{e.where}" if (e.where or "").startswith("settle.") else "recipe.settle",
                    e.message, fix=e.fix or FIX) from None


def _ladder(raw, where: str) -> tuple[tuple[float, ...], int]:
    """A recipe's ``ladder``: 1 to :data:`MAX_RUNGS` increasing positive fractions, and
    ``from_edits`` ≥ 1 (``check_ladder``, the rule of ``update.clamp_ladder``)."""
    lad = _section(raw, where, "recipe.ladder", LADDER_FIELDS)
    fractions = lad["fractions"]
    if not isinstance(fractions, list) or not 1 <= len(fractions) <= MAX_RUNGS:
        raise _fail(where, "recipe.ladder.fractions", f"must be a list of 1 to {MAX_RUNGS} numbers",
                    fix="e.g. [0.5, 0.75, 1.0] (fractions of edit.objective.clamp_norm_factor), or [1.0] for none")
    for i, f in enumerate(fractions):
        _number(f, where, f"recipe.ladder.fractions[{i}]", False)
    try:
        check_ladder(fractions, "recipe.ladder.fractions", "e.g. [0.5, 0.75, 1.0] (smallest first)")
    except ConfigError as e:
        raise _fail(where, "recipe.ladder.fractions", e.message, fix=e.fix or FIX) from None
    _number(lad["from_edits"], where, "recipe.ladder.from_edits", True)
    if not 1 <= lad["from_edits"] <= MAX_SEED:
        raise _fail(where, "recipe.ladder.from_edits", f"{lad['from_edits']} must be at least 1",
                    fix="e.g. 2 (climb once the bundle carries two edits)")
    return tuple(float(f) for f in fractions), int(lad["from_edits"])
