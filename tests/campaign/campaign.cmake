# Fault campaign (docs/fault-campaign.md): randomized, seeded schedules of faults while client
# processes decide keys, and a history checker over every answer.

# campaign_client: one training process (libdetd), recording every answer.
add_executable(campaign_client ${CMAKE_CURRENT_LIST_DIR}/campaign_client.c)
target_link_libraries(campaign_client PRIVATE detd)

# The checker's own tests (crafted histories) and the CI campaign. The
# campaign runs a fixed set of 24 seeds that covers every fault in both
# modes (test_campaign.py: CI_SEEDS, about 2 min on 2 cores), or
# DETD_CAMPAIGN_SCHEDULES consecutive seeds from DETD_CAMPAIGN_SEED.
detd_pytest(campaign_checker tests/campaign/test_checker.py 120)
detd_pytest(campaign tests/campaign/test_campaign.py 900)
# Labelled so the sanitizer run can leave it out (scripts/test-all.sh:
# ctest -LE campaign there); the release run includes it.
set_tests_properties(campaign PROPERTIES LABELS campaign)
