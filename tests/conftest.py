"""Session-wide test configuration."""

import sys


def pytest_terminal_summary(terminalreporter) -> None:
    """Print the OpInfo coverage number when the OpInfo tests ran."""
    module = sys.modules.get("tests.test_opinfo")
    if module is not None and module.RESULTS:
        terminalreporter.write_line(module.coverage_line())
