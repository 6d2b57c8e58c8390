"""What the fuzzer (fuzz/) and the conformance suite (conformance/) share, so that neither imports the other: cases and
findings as JSON (case.py, astjson.py), the oracles (check.py, ast_eval.py), inputs and programs (inputs.py,
programs.py, models.py + models.json), the command-line checks (cliargs.py) and the regression corpus (corpus/)."""
