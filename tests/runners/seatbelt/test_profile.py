"""Generated Seatbelt profiles: golden files and structural checks (run on any platform).

Regenerate the golden files after an intended change with
``DSH_UPDATE_GOLDEN=1 python -m pytest tests/runners/seatbelt``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.runners.seatbelt.profile import build_profile, macos_canonical, name_regexes
from dsh.runners.seatbelt.runner import SANDBOX_EXEC, SeatbeltRunner, wrap_argv
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy

from tests.runners.seatbelt.sbpl import Atom, SbplSyntaxError, atoms, head, params, parse

GOLDEN = Path(__file__).parent / "golden"
WS = Path("/Users/dev/project")
TMPDIR = Path("/var/folders/xy/abc123/T")


def mac_policy(
    mode: SandboxMode = SandboxMode.WORKSPACE_WRITE, *, network: bool = False, **kw: object
) -> SandboxPolicy:
    """A policy as the policy service would resolve it on a Mac."""
    roots = (WS, Path("/tmp"), TMPDIR) if mode is SandboxMode.WORKSPACE_WRITE else ()
    protected = tuple(r / n for r in roots for n in (".git", ".dsh"))
    return SandboxPolicy(
        mode=mode,
        workspace=WS,
        writable_roots=roots,
        protected_paths=(*protected, Path("/Users/dev/main-repo/.git/worktrees/project")),
        read_only_paths=(WS / "vendor",) if roots else (),
        hidden_paths=(Path("/Users/dev/.ssh"), Path("/Users/dev/.aws")),
        network=network,
        **kw,  # type: ignore[arg-type]
    )


CASES = {
    "read-only": mac_policy(SandboxMode.READ_ONLY),
    "workspace-write": mac_policy(),
    "network-on": mac_policy(network=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_profiles(name: str) -> None:
    text = build_profile(CASES[name]).text
    golden = GOLDEN / f"{name}.sb"
    if os.environ.get("DSH_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"missing {golden}; run with DSH_UPDATE_GOLDEN=1"
    assert text == golden.read_text()


def test_golden_params_are_canonical_paths() -> None:
    profile = build_profile(CASES["workspace-write"])
    values = dict(profile.params)
    assert values["WRITABLE_ROOT_0"] == "/Users/dev/project"
    assert values["WRITABLE_ROOT_1"] == "/private/tmp"
    assert values["WRITABLE_ROOT_2"] == "/private/var/folders/xy/abc123/T"
    assert "/private/tmp/.git" in values.values()
    assert "/Users/dev/main-repo/.git/worktrees/project" in values.values()
    assert profile.define_args()[0] == f"-D{profile.params[0][0]}={profile.params[0][1]}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_structure(name: str) -> None:
    policy = CASES[name]
    profile = build_profile(policy)
    forms = parse(profile.text)
    # version first, deny default second: nothing is allowed by omission
    assert [head(f) for f in forms[:2]] == ["version", "deny"]
    assert [a.text for a in atoms(forms[1])] == ["deny", "default"]
    # no policy path is spliced into the text: they all travel as -D parameters
    for path in [*policy.writable_roots, *policy.protected_paths, *policy.hidden_paths]:
        assert str(path) not in profile.text and macos_canonical(path) not in profile.text
    defined = {key for key, _ in profile.params}
    used = {key for form in forms for key in params(form)}
    assert used == defined
    write_allows = [f for f in forms if head(f) == "allow" and _ops(f) & {"file-write*"}]
    for rule in write_allows:
        fixed = [a.text for a in atoms(rule) if a.kind == "string"]
        assert params(rule) or set(fixed) <= {"/dev/ptmx"}, f"write rule without a param: {rule}"
    if policy.mode is SandboxMode.WORKSPACE_WRITE:
        root_allows = [f for f in write_allows if any(k.startswith("WRITABLE_ROOT") for k in params(f))]
        assert len(root_allows) == len(policy.writable_roots)
        protected_keys = {k for k in defined if k.startswith("PROTECTED")}
        for rule in root_allows:
            assert protected_keys <= set(params(rule))  # each allow excludes them (require-not)
        last_allow = max(forms.index(f) for f in root_allows)
        denies = [
            i
            for i, f in enumerate(forms)
            if head(f) == "deny" and _ops(f) == {"file-write*"} and protected_keys <= set(params(f))
        ]
        assert denies and min(denies) > last_allow, "protected denies must follow the allows"
    else:
        assert not any(k.startswith("WRITABLE_ROOT") for k in defined)
    net = [f for f in forms if _ops(f) & {"network*"}]
    assert [head(f) for f in net] == (["allow"] if policy.network else ["deny"])


def _ops(form: list[object]) -> set[str]:
    return {a.text for a in form[1:] if isinstance(a, Atom) and a.kind == "symbol"}


def test_dev_null_is_writable_in_read_only() -> None:
    text = build_profile(CASES["read-only"]).text
    assert '(allow file-write-data (require-all (literal "/dev/null")' in text


def test_hidden_paths_are_excluded_from_reads_and_denied_after() -> None:
    forms = parse(build_profile(CASES["workspace-write"]).text)
    read_allow = next(i for i, f in enumerate(forms) if head(f) == "allow" and _ops(f) == {"file-read*"})
    hidden_keys = {"HIDDEN_0", "HIDDEN_1"}
    assert hidden_keys <= set(params(forms[read_allow]))
    deny = next(i for i, f in enumerate(forms) if head(f) == "deny" and hidden_keys <= set(params(f)))
    assert deny > read_allow


def test_name_regexes_only_for_safe_names() -> None:
    assert name_regexes([".git", ".dsh"]) == ['(regex #"/\\.dsh(/|$)")', '(regex #"/\\.git(/|$)")']
    assert name_regexes(['we"ird', "a)b", "x\ny", "..", ".env.local"]) == ['(regex #"/\\.env\\.local(/|$)")']


def test_unsafe_protected_name_is_a_named_degradation() -> None:
    policy = SandboxPolicy(
        mode=SandboxMode.WORKSPACE_WRITE,
        workspace=WS,
        writable_roots=(WS,),
        protected_paths=(WS / 'odd"name',),
    )
    text = build_profile(policy).text
    assert 'odd"name' not in text
    parse(text)  # still well formed
    enforcement = SeatbeltRunner().enforcement(policy)
    assert enforcement.degradations == ("seatbelt-protected-rename",)


def test_parser_rejects_unbalanced_text() -> None:
    with pytest.raises(SbplSyntaxError):
        parse("(version 1)\n(deny default")
    with pytest.raises(SbplSyntaxError):
        parse('(allow file-read* (literal "unterminated))')


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/var/folders/x", "/private/var/folders/x"),
        ("/var", "/private/var"),
        ("/tmp", "/private/tmp"),
        ("/tmp/", "/private/tmp"),
        ("/etc/hosts", "/private/etc/hosts"),
        ("/private/tmp/x", "/private/tmp/x"),
        ("/variable/x", "/variable/x"),
        ("/tmpfoo", "/tmpfoo"),
        ("/Users/dev/tmp", "/Users/dev/tmp"),
        ("/tmp/a/../b", "/private/tmp/b"),
    ],
)
def test_macos_canonical(given: str, expected: str) -> None:
    assert macos_canonical(given) == expected


def test_wrapped_argv_is_exact() -> None:
    command: tuple[str | bytes, ...] = ("printf", "%s\\0", "a b", "", "$x", "l1\nl2", b"\xff")
    argv = wrap_argv(SANDBOX_EXEC, CASES["workspace-write"], command)
    assert argv[:2] == (SANDBOX_EXEC, "-p")
    split = argv.index("--")
    assert argv[split + 1 :] == command
    assert all(isinstance(a, str) and a.startswith("-D") for a in argv[3:split])


def test_limits_are_named_degradations() -> None:
    limits = ResourceLimits(max_processes=10, max_memory_bytes=1 << 30)
    enforcement = SeatbeltRunner().enforcement(mac_policy(limits=limits))
    assert enforcement.level == "partial"
    assert enforcement.degradations == ("seatbelt-limit-processes", "seatbelt-limit-memory")
    assert SeatbeltRunner().enforcement(mac_policy()).level == "full"


def test_explain_lists_rules_params_and_network() -> None:
    plan = SeatbeltRunner().explain(mac_policy())
    assert "(deny default)" in plan.rules
    assert "param WRITABLE_ROOT_1 = /private/tmp" in plan.rules
    assert plan.network.startswith("off")
