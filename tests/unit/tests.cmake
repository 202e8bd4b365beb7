# one detd_unit_test(...) line per module test
detd_unit_test(test_store detd_store)
