"""``run_script``: the benchmarks report bad input as the CLI does, one ``error:`` line and exit code 2."""

import pytest

from bcg_deploy.errors import BcgdError, run_script


def test_a_bcgd_error_is_one_line_and_exit_code_2(capsys):
    def main() -> None:
        raise BcgdError("checkpoint x.pt not found (for fight)")

    with pytest.raises(SystemExit) as exit_info:
        run_script(main)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: checkpoint x.pt not found (for fight)\n"


def test_other_errors_are_not_swallowed():
    def main() -> None:
        raise ValueError("a bug, with its traceback")

    with pytest.raises(ValueError, match="a bug"):
        run_script(main)
