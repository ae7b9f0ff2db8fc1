from dsh.cli import main

main()
