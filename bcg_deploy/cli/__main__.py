from bcg_deploy.cli import main

main()
