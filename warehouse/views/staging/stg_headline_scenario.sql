-- stg_headline_scenario: the one scenario per (run_id, variant) whose latencies are the headline:
-- the lowest-concurrency step (the latency a single user sees), ties broken by scenario name. The
-- `jitter` scenario (a fixed-length measuring instrument for the jitter figures) is never the headline.
-- Every other view and the reports take "the headline" from here. Columns: every perf_summary
-- column of that scenario.

with final as (
    select *
    from perf_summary
    where scenario <> 'jitter'
    qualify row_number() over (partition by run_id, variant order by concurrency, scenario) = 1
)

select * from final
