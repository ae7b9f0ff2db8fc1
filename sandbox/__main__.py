from dsh.sandbox.cli import main

main()
