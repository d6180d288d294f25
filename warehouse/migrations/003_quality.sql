-- 003_quality: quality suites with deltas and confidence (issue #4). Columns are appended in the
-- order of warehouse/contract.py.

-- How a score follows from its suite's samples (e.g. 'mean(score)', 'p99(kl) where ctx=512'),
-- which tasks/quality/deltas.py recomputes on paired bootstrap resamples; and why a value is NULL.
alter table quality_scores add column sample_stat varchar;
alter table quality_scores add column note varchar;

-- One row per (non-reference variant, suite, metric): the delta against the reference.
create table quality_deltas (
    run_id varchar,
    variant varchar,
    reference_variant varchar,
    suite varchar,
    metric varchar,
    unit varchar,                    -- fraction | nats | ratio | count | tokens | rating | distance
    higher_is_better boolean,
    reference_value double,          -- in `unit`, over the samples both variants have
    value double,                    -- in `unit`
    delta double,                    -- value - reference_value, in `unit`
    ci_low double,                   -- paired bootstrap percentile CI of delta, in `unit`
    ci_high double,
    confidence double,               -- e.g. 0.95
    p_value double,                  -- exact McNemar, 0/1 per-sample scores only
    n integer,                       -- paired samples
    retention_99 boolean,            -- keeps >= 99 % of the reference score (MLPerf)
    retention_999 boolean,           -- keeps >= 99.9 %
    verdict varchar,                 -- better | worse | inconclusive | identical | no_ci | no_data
    method varchar,
    primary key (run_id, variant, suite, metric)
);
