"""Who is this caller: the one module that turns names into the principals grants are matched against.

spec/access.md, "Principals": normalize (trim, casefold), map aliases, expand
groups. Every surface (scope compilation, re-verification, `ki access explain`,
the web pages, HTTP, MCP, the CLI, the index projection, the grant writer)
resolves names here; tests/ki_core/test_principals_owner.py fails when another
module under src/ calls the low-level steps itself.

The group prefix rule: `group:` is optional. `group:partner` and `partner` are
one principal everywhere (a grant, a membership, `--as`, an API key, a token's
group claim, an alias, `security.admin_principals`): normalization drops the
prefix, so a local group written `partner` and a grant naming `group:partner`
meet. Users and groups share one namespace (as they did before: a membership
makes the group's name a principal of its members), so a user may not carry a
group's name. Migration 0015 stored the rules written before without it.
The admin role is `security.admin_principals` (default `role:admin`,
`system:admin`), decided on the expanded set. A principal is "unknown" when,
after aliases, no grant, deny, membership, alias or API key of this store names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from functools import partial

from sqlalchemy import select, union
from sqlalchemy.orm import Session

from ki_core.acl import Viewer, access_projection, in_set
from ki_core.config import Settings
from ki_core.models import Grant, GroupMembership

GROUP_PREFIX = "group:"


class InvalidPrincipal(ValueError):
    """A principal that is empty after trimming cannot be granted anything."""


# ------------------------------------------------------------ one name


def normalize_principal(raw: str) -> str:
    """Trim, casefold and drop the optional group prefix: 'Alice ', 'alice' are one principal
    (Principals 1), and so are 'group:Partner' and 'partner' (the group prefix rule above)."""
    name = raw.strip().casefold()
    return name[len(GROUP_PREFIX):].strip() if name.startswith(GROUP_PREFIX) else name


def stored_principal(raw: str) -> str:
    """The form a principal is stored in: normalized, as named; empty is refused.

    Aliases are applied when grants are matched (`stored_names`), not here, so a
    change of `security.principal_aliases` applies to stored grants and
    memberships at once, in both directions.
    """
    principal = normalize_principal(raw)
    if not principal:
        raise InvalidPrincipal(f"principal {raw!r} is empty after trimming")
    return principal


def group_principal(name: str) -> str:
    """The principal of the group NAME: 'Partner', 'group:partner' and 'group: Partner' are 'partner'.

    The sign-in code maps a token's group claims through it (`principals_from_claims`).
    """
    principal = normalize_principal(name)
    if not principal:
        raise InvalidPrincipal(f"group {name!r} has no name")
    return principal


def principals_from_claims(
    subject: str, groups: Iterable[object] | None = None, also: Iterable[str] = ()
) -> tuple[str, ...]:
    """A signed-in user's principals from a verified token: the subject, the same user by other claims
    (e-mail; aliases map them), then each group claim as a group.

    A claim 'partner', '/partner' (a directory's group path) and 'group:partner'
    are the same group; blank claims and non-strings are dropped, duplicates kept once.
    """
    principals = [normalize_principal(subject)] + [normalize_principal(name) for name in also]
    principals += [normalize_principal(claim.lstrip("/")) for claim in groups or () if isinstance(claim, str)]
    return tuple(dict.fromkeys(p for p in principals if p))


def member_names(raw: Iterable[str]) -> set[str]:
    """Stored names of group members as a source lists them: normalized, blanks skipped."""
    return {m for m in map(normalize_principal, raw) if m}


# ------------------------------------------------------------ aliases


def principal_aliases(settings: Settings) -> dict[str, str]:
    """security.principal_aliases with keys and values normalized.

    An alias whose canonical name is empty maps to '' and is then dropped like
    any empty principal (fail closed); an empty key can never match.
    """
    aliases = {}
    for alias, canonical in settings.security.principal_aliases.items():
        key = normalize_principal(alias)
        if key:
            aliases[key] = normalize_principal(canonical)
    return aliases


def canonical_principal(raw: str, aliases: Mapping[str, str]) -> str:
    """Normalized, then replaced by its canonical name if it is an alias ('' when empty).

    One step only: the canonical name is not looked up again.
    """
    normalized = normalize_principal(raw)
    return aliases.get(normalized, normalized)


def canonical_principals(raw: Iterable[str], settings: Settings) -> frozenset[str]:
    """The caller's set before group expansion: normalized, alias-mapped, empties dropped.

    A lone string is one principal, never a sequence of one-letter principals.
    """
    if isinstance(raw, str):
        raw = [raw]
    aliases = principal_aliases(settings)
    return frozenset(p for p in (canonical_principal(r, aliases) for r in raw) if p)


def stored_names(canonical: Iterable[str], aliases: Mapping[str, str]) -> frozenset[str]:
    """Every stored principal that denotes one of these canonical principals under today's aliases.

    Grants and memberships keep the name the source or operator gave (normalized
    only), so a change of `security.principal_aliases` applies to them at once,
    both ways: a new alias joins the old grants of that name, a removed alias
    stops matching. A name is its own only when it is not itself an alias.
    """
    wanted = set(canonical)
    names = {name for name in wanted if name not in aliases}
    names |= {alias for alias, target in aliases.items() if target in wanted}
    return frozenset(names)


def names_of(raw: str, settings: Settings) -> frozenset[str]:
    """Every stored name of the principal `raw` denotes under today's aliases (never empty)."""
    stored_principal(raw)
    aliases = principal_aliases(settings)
    return stored_names([canonical_principal(raw, aliases)], aliases)


def paths_by_stored_name(paths: Mapping[str, tuple[str, ...]], aliases: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """{stored name: path} for `expand_groups` paths: what explain needs to narrate a matched grant."""
    return {name: path for principal, path in paths.items() for name in stored_names([principal], aliases)}


# ------------------------------------------------------------ admin


def admin_principals(settings: Settings) -> frozenset[str]:
    return frozenset(p for p in map(normalize_principal, settings.security.admin_principals) if p)


def assertion_refusal(principal: str, patterns: Iterable[str], settings: Settings) -> str | None:
    """Why a trusted front end may not name PRINCIPAL under its key's patterns: 'admin', 'pattern' or None.

    Compared as the scope compiler will see the name (normalized, alias-mapped),
    so an alias of an admin principal is an admin principal too; an admin only
    by an exact pattern. Patterns match the name as sent (trimmed, casefolded,
    any `group:` kept) or its canonical form, so `group:*` admits only names
    sent with the prefix; as the prefix is optional, those may still be users.
    """
    canonical = canonical_principal(principal, principal_aliases(settings))
    sent = principal.strip().casefold()
    patterns = [p.strip().casefold() for p in patterns]
    exact = set(patterns) | {normalize_principal(p) for p in patterns}
    if canonical in admin_principals(settings) and not {canonical, sent, normalize_principal(principal)} & exact:
        return "admin"
    if not any(fnmatchcase(name, p) for p in patterns for name in (sent, canonical)):
        return "pattern"
    return None


# ------------------------------------------------------------ groups


def expand_groups(
    session: Session, canonical: Iterable[str], aliases: Mapping[str, str] | None = None
) -> dict[str, tuple[str, ...]]:
    """Every canonical principal reached from the (already canonical) set, with one path that reached it.

    Breadth-first, one set-based query per level of nesting; a group already in
    the set is not followed again, so cycles terminate. Memberships are matched
    by every stored name of the members and their groups are taken by canonical
    name (`stored_names`). The path is what `explain` prints ("allowed via group Z").
    """
    aliases = aliases or {}
    paths = {p: (p,) for p in sorted(set(canonical))}
    frontier = sorted(paths)
    while frontier:
        reached: list[str] = []
        members = {name: member for member in frontier for name in stored_names([member], aliases)}
        for name, stored_group in _memberships_of(session, sorted(members)):
            group = aliases.get(stored_group, stored_group)
            if group not in paths:
                paths[group] = (*paths[members[name]], group)
                reached.append(group)
        frontier = sorted(reached)
    return paths


def _memberships_of(session: Session, members: list[str]) -> list[tuple[str, str]]:
    stmt = (
        select(GroupMembership.member_principal, GroupMembership.group_principal)
        .where(in_set(GroupMembership.member_principal, members))
        .distinct()
    )
    return sorted(session.execute(stmt))


def caller_paths(session: Session, principals: Iterable[str], settings: Settings) -> dict[str, tuple[str, ...]]:
    """E with one membership path per principal (caller first): what `explain` narrates."""
    return expand_groups(session, canonical_principals(principals, settings), principal_aliases(settings))


def stored_paths(paths: Mapping[str, tuple[str, ...]], settings: Settings) -> dict[str, tuple[str, ...]]:
    """`caller_paths` keyed by every stored name of each principal: grants are stored under those."""
    return paths_by_stored_name(paths, principal_aliases(settings))


def expand_principals(session: Session, principals: Iterable[str], settings: Settings) -> frozenset[str]:
    """E of spec/access.md: the caller's principals plus every group they reach (canonical names)."""
    return frozenset(caller_paths(session, principals, settings))


# ------------------------------------------------------------ the viewer


def viewer_for(session: Session, principals: Iterable[str], settings: Settings) -> Viewer:
    """Canonicalize and expand the caller's principals; admin status is decided on E."""
    return viewer_of(expand_principals(session, principals, settings), settings)


def viewer_of(expanded: Iterable[str], settings: Settings) -> Viewer:
    """The viewer of E (canonical names, groups expanded)."""
    expanded = frozenset(expanded)
    return Viewer(
        principals=stored_names(expanded, principal_aliases(settings)),
        is_admin=bool(expanded & admin_principals(settings)),
        acl_mode=settings.security.source_acl_mode,
    )


def viewer_of_canonical(session: Session, canonical: Iterable[str], settings: Settings) -> Viewer:
    """The viewer of an already canonical set (a scope cache key): expand, then decide admin."""
    return viewer_of(expand_groups(session, canonical, principal_aliases(settings)), settings)


def index_projection(
    session: Session, version_ids: Iterable[str], settings: Settings
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """ki_core.acl.access_projection under today's aliases: the index's allowed/denied principals."""
    aliases = principal_aliases(settings)
    return access_projection(session, version_ids, acl_mode=settings.security.source_acl_mode,
                             aliases=aliases, names_of=partial(_names_under, aliases))


def _names_under(aliases: Mapping[str, str], principal: str) -> frozenset[str]:
    return stored_names([principal], aliases)


# ------------------------------------------------------------ unknown


def unknown_principals(session: Session, principals: Iterable[str], settings: Settings) -> list[str]:
    """The caller's names this store knows nothing of, as given (sorted, blanks skipped).

    Known: after aliases, an admin principal, or named by a grant or deny, a
    group membership (as group or member), an alias (either side) or an API
    key's principals. A search as an unknown name is an empty scope; saying so
    is the difference between "no hits" and a typo.
    """
    aliases = principal_aliases(settings)
    given = [p for p in ([principals] if isinstance(principals, str) else principals) if normalize_principal(p)]
    names = {p: stored_names([canonical_principal(p, aliases)], aliases) for p in given}
    stored = _stored_among(session, sorted(set().union(*names.values()))) if names else set()
    known = stored | set(aliases) | set(aliases.values()) | admin_principals(settings) | _key_principals(settings)
    return sorted(p for p in given if not (names[p] | {canonical_principal(p, aliases)}) & known)


def unknown_warning(unknown: Iterable[str]) -> str:
    """The one line every surface prints for unknown principals."""
    return (f"warning: unknown principal(s) {', '.join(map(repr, unknown))}: no grant, group, alias or API key "
            "of this store names them, so they see nothing")


def _stored_among(session: Session, names: list[str]) -> set[str]:
    """Those of NAMES some grant or membership stores."""
    found = union(
        select(Grant.principal).where(in_set(Grant.principal, names)),
        select(GroupMembership.group_principal).where(in_set(GroupMembership.group_principal, names)),
        select(GroupMembership.member_principal).where(in_set(GroupMembership.member_principal, names)),
    )
    return set(session.scalars(select(found.subquery().c[0])))


def _key_principals(settings: Settings) -> set[str]:
    aliases = principal_aliases(settings)
    return {canonical_principal(p, aliases) for spec in settings.security.api_keys.values() for p in spec.principals}
