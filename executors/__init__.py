"""Shell executors, the subprocess service, output retention and shell-env.

Import names from their modules (``dsh.executors.local``, ``dsh.executors.process``,
...): this package re-exports nothing, so importing the seam vocabulary (or
``dsh-sandbox --help``) does not load the execution machinery.
"""
