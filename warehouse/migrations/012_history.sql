-- 012_history: nights as a history (issue 25). Two tables the loader derives in Python after each run's load
-- (warehouse/history.py), declared in warehouse/contract.py (DERIVED_TABLES) with the result tables:
--
-- series_keys: which series each (run, variant) belongs to, keyed on what was measured rather than on the
-- config's name: the artifact's content hash (or the hosted model), engine, quantization, speculative
-- decoding and engine options, the hardware, and the workload (the perf sweep's defining fields, or a
-- suite's name, version, limit, seed and parameters). Renaming a config keeps its series; a new model
-- (another artifact hash) starts a new one. The engine's version is not part of the key: a version change
-- stays in the series and is marked as a known cause (v_history.known_cause).
--
-- change_points: Apache Otava's e-divisive change points of every (series, metric) history, recomputed for
-- the series a load touches. The band rule needs no table (stg_band).

create table series_keys (
    run_id varchar,
    variant varchar,
    scope varchar,                   -- 'perf', or the quality suite key whose metrics this key covers
    series_key varchar,              -- sha256[:16] of variant_key, hardware_id and workload_key
    variant_key varchar,             -- sha256[:16] of what served: artifact hash (or model), engine, quantization, speculative, engine options
    workload_key varchar,            -- sha256[:16] of what was run: the perf sweep's defining fields, or the suite's spec and version
    primary key (run_id, variant, scope)
);

create table change_points (
    series_key varchar,
    metric varchar,                  -- as in v_history
    run_id varchar,                  -- the first run after the change
    method varchar,                  -- otava e-divisive and its settings
    mean_before double,              -- metric's unit: mean of the segment before the change
    mean_after double,               -- mean of the segment after it (up to the next change point)
    std_before double,               -- population std of those segments
    std_after double,
    n_before integer,                -- nights in each segment
    n_after integer,
    change_pct double,               -- (mean_after / mean_before - 1) * 100
    p_value double,                  -- Otava's two-sided t-test between the segments
    first_seen_run_id varchar,       -- the run whose load first reported this change point
    primary key (series_key, metric, run_id)
);
