from kamalcli.cli import main

main()
