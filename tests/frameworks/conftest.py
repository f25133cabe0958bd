"""The framework tests need the installed toolyard package (the wheel) and the frameworks
pinned in requirements.txt; run them with tests/frameworks/run.sh."""
