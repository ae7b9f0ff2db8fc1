"""``dsh-sandbox completion bash|zsh|fish``: print the shell's completion script.

The script is click's own: the shell calls ``dsh-sandbox`` back with
``_DSH_SANDBOX_COMPLETE`` set, and click answers from the same command tree
``--help`` shows, so completion cannot drift from the commands.
"""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")

INSTALL = {
    "bash": 'eval "$(dsh-sandbox completion bash)"   # in ~/.bashrc',
    "zsh": 'eval "$(dsh-sandbox completion zsh)"    # in ~/.zshrc',
    "fish": "dsh-sandbox completion fish > ~/.config/fish/completions/dsh-sandbox.fish",
}


@click.command(
    "completion",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Install:\n\n\b\n" + "\n".join(INSTALL[s] for s in SHELLS),
)
@click.argument("shell", type=click.Choice(SHELLS), metavar="SHELL")
def completion(shell: str) -> None:
    """Print the completion script for SHELL (bash, zsh or fish)."""
    # Imported here: only this command needs the completion machinery.
    from click.shell_completion import get_completion_class

    root = click.get_current_context().find_root()
    prog_name = root.info_name or "dsh-sandbox"
    complete_var = "_{}_COMPLETE".format(prog_name.replace("-", "_").upper())
    cls = get_completion_class(shell)
    if cls is None:  # click registers all three; a later click might not
        raise click.UsageError(f"click cannot complete {shell} here; use one of bash, zsh, fish")
    click.echo(cls(root.command, {}, prog_name, complete_var).source(), nl=False)
