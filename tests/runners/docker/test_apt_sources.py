"""Where the workload image's packages come from: the host's own apt sources for
the suite it runs, mmdebstrap's default otherwise, ``DSH_DEBIAN_MIRROR`` over
both.  Pure: synthetic ``/etc`` trees, no network, no daemon."""

from __future__ import annotations

from pathlib import Path

from dsh.runners.docker.apt_sources import AptEntry, AptSources, parse_deb822, parse_one_line, read_apt_sources
from dsh.runners.docker.debian import plan_debian

ONE_LINE = """\
# deb http://disabled.invalid/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://m.invalid/debian bookworm main contrib
deb-src http://m.invalid/debian bookworm main
deb http://m.invalid/debian bookworm-updates main  # trailing comment
deb http://third.invalid/apt bookworm stable
deb http://cloud.invalid/apt cloud-bookworm main
not a source line
"""

DEB822 = """\
Types: deb deb-src
URIs: http://a.invalid/debian http://b.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/k.gpg
Architectures: amd64 arm64

# a comment between stanzas
Types: deb
URIs: http://sec.invalid/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: http://off.invalid/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb
URIs: http://inline.invalid/debian
Suites: bookworm
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 -----END PGP PUBLIC KEY BLOCK-----
"""


def etc(root: Path, codename: str, one_line: str = "", sources: dict[str, str] | None = None) -> Path:
    (root / "etc/apt/sources.list.d").mkdir(parents=True)
    (root / "etc/os-release").write_text(f'ID=debian\nVERSION_CODENAME="{codename}"\n')
    if one_line:
        (root / "etc/apt/sources.list").write_text(one_line)
    for name, text in (sources or {}).items():
        (root / "etc/apt/sources.list.d" / name).write_text(text)
    return root


def test_one_line_entries_keep_their_options_and_skip_comments() -> None:
    entries = parse_one_line(ONE_LINE)
    assert entries[0] == AptEntry("deb", "http://m.invalid/debian", "bookworm", ("main", "contrib"),
                                  (("arch", "amd64"), ("signed-by", "/k.gpg")))
    assert entries[0].one_line() == "deb [arch=amd64 signed-by=/k.gpg] http://m.invalid/debian bookworm main contrib"
    assert [e.kind for e in entries] == ["deb", "deb-src", "deb", "deb", "deb"]
    assert entries[2].components == ("main",)  # the comment is not a component


def test_deb822_stanzas_expand_and_skip_disabled_and_inline_keys() -> None:
    entries = parse_deb822(DEB822)
    assert len(entries) == 2 * 2 * 2 + 1  # types x URIs x suites, plus the security stanza
    first = entries[0]
    assert first.one_line() == (
        "deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64,arm64] http://a.invalid/debian bookworm main"
    )
    assert not any("off.invalid" in e.uri or "inline.invalid" in e.uri for e in entries)


def test_the_host_suites_debian_entries_become_the_mirrors(tmp_path: Path) -> None:
    root = etc(tmp_path, "bookworm", ONE_LINE, {"debian.sources": DEB822, "extra.list.disabled": ONE_LINE,
                                                "third.list": "deb http://third.invalid/x bookworm-updates stable\n"})
    plan = plan_debian(suite="bookworm", env={}, sources=read_apt_sources(root))
    assert plan.mirrors == (
        "deb [arch=amd64 signed-by=/k.gpg] http://m.invalid/debian bookworm main contrib",
        "deb http://m.invalid/debian bookworm-updates main",
        "deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64,arm64] http://a.invalid/debian bookworm main",
        "deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64,arm64] http://a.invalid/debian bookworm-updates main",
        "deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64,arm64] http://b.invalid/debian bookworm main",
        "deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64,arm64] http://b.invalid/debian bookworm-updates main",
        "deb http://sec.invalid/debian-security bookworm-security main",
    )
    argv = plan.argv(tmp_path / "rootfs.tar")
    assert argv[-len(plan.mirrors) - 2:] == ["bookworm", str(tmp_path / "rootfs.tar"), *plan.mirrors]


def test_another_suite_than_the_hosts_leaves_the_choice_to_mmdebstrap(tmp_path: Path) -> None:
    sources = read_apt_sources(etc(tmp_path, "bookworm", ONE_LINE))
    plan = plan_debian(suite="trixie", env={}, sources=sources)
    assert plan.mirrors == ()
    assert plan.argv(tmp_path / "rootfs.tar")[-2:] == ["trixie", str(tmp_path / "rootfs.tar")]
    assert plan.describe_source() == "mmdebstrap's default mirror"
    # A host with no apt sources at all (or no release name) is the same.
    assert AptSources(None, parse_one_line(ONE_LINE)).entries_for("bookworm") == ()
    assert read_apt_sources(tmp_path / "nothing-here") == AptSources(None, ())


def test_the_override_wins_over_the_host(tmp_path: Path) -> None:
    sources = read_apt_sources(etc(tmp_path, "bookworm", ONE_LINE))
    plan = plan_debian(suite="bookworm", env={"DSH_DEBIAN_MIRROR": "http://override.invalid/debian"}, sources=sources)
    assert plan.mirrors == ("http://override.invalid/debian",)
    assert plan_debian(suite="bookworm", mirror="/etc/my.sources", env={}, sources=sources).mirrors == (
        "/etc/my.sources",)


def test_no_package_host_is_written_into_the_builder() -> None:
    import dsh.runners.docker.apt_sources as apt_sources
    import dsh.runners.docker.debian as debian

    for module in (debian, apt_sources):
        text = Path(module.__file__ or "").read_text()
        assert "://" not in text.replace('"://"', ""), module.__name__
