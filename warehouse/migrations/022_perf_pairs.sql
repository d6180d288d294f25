-- 022_perf_pairs: two variants' closed-loop steps compared round by round (issue 36): the paired interval of the
-- ratio of their throughputs, which v_recommendation's tie rule reads. Derived by the loader in Python after each
-- run's load (warehouse/pairs.py), declared in warehouse/contract.py (DERIVED_TABLES). Both orders of a pair are
-- stored (ratio = variant / other_variant). A run loaded before this table has no rows: the tie rule then compares
-- the two steps' own intervals, as before.

create table perf_pairs (
    run_id varchar,
    variant varchar,
    scenario varchar,
    other_variant varchar,
    other_scenario varchar,
    n_pairs integer,                      -- rounds (repeat indices) both steps measured
    ci_level double,                      -- the lower of the two steps' perf_summary.ci_level
    request_throughput_ratio double,      -- geometric mean of the per-round ratio of completed requests/s
    request_throughput_ratio_ci_low double,   -- Student's paired t interval of it (log scale), at ci_level
    request_throughput_ratio_ci_high double,
    output_throughput_ratio double,       -- the same for output tokens/s
    output_throughput_ratio_ci_low double,
    output_throughput_ratio_ci_high double,
    primary key (run_id, variant, scenario, other_variant, other_scenario)
);
