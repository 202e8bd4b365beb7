# one detd_unit_test(...) line per module test
