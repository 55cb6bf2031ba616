"""``python -m bcg_deploy.cli``: the bcgd command."""

from bcg_deploy.cli import main

if __name__ == "__main__":  # not when a spawned worker process imports this module
    main()
