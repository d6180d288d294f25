-- v_recommendation_history: the pick over time, one row per night (run that did not fail): which variant
-- v_recommendation recommended, at what load and with what retention, and whether the pick changed from the
-- previous night of the same history. A history is keyed as the series are (v_history): on the reference
-- variant's perf series, i.e. what the reference served, on which hardware, under which workload; renaming
-- the config keeps it, a new reference model starts a new one. Columns:
--   series_key                    the reference's perf series (series_keys, scope 'perf'); runs without one:
--                                 'config:<name>/<hardware_id>'
--   hardware_id, config_name, run_id, started_at (UTC)
--   reference_variant
--   recommended_variant           the night's pick; NULL: none (see v_recommendation.decision_note)
--   recommended_variant_key       what the pick served (series_keys.variant_key): a renamed variant is the same pick
--   load_req_s                    the pick's sustainable load (requests/s at the highest step meeting the SLO)
--   retention, retention_ci_low, retention_ci_high   the pick's retention of its binding gating metric
--   previous_pick                 the previous night's recommended_variant in this history
--   pick_changed                  the pick differs (by what it served) from the previous night's; NULL on the first
-- Only run_id, variant, recommended_variant, sustainable_req_s and the retention columns are read from
-- v_recommendation (the CTE `picks`), so a change of its other columns does not reach this view.

with picks as (
    select
        run_id, variant, recommended_variant, sustainable_req_s as load_req_s, retention,
        retention_ci_low, retention_ci_high
    from v_recommendation
),

nights as (
    select
        r.run_id,
        r.hardware_id,
        r.config_name,
        timezone('UTC', r.started_at) as started_at,
        r.reference_variant,
        coalesce(k.series_key, 'config:' || r.config_name || '/' || coalesce(r.hardware_id, '?')) as series_key
    from runs as r
    left join series_keys as k on r.run_id = k.run_id and r.reference_variant = k.variant and k.scope = 'perf'
    where r.status <> 'failed'
),

chosen as (
    select
        n.*,
        p.recommended_variant,
        pk.variant_key as recommended_variant_key,
        p.load_req_s,
        p.retention,
        p.retention_ci_low,
        p.retention_ci_high
    from nights as n
    left join (select distinct run_id, recommended_variant from picks) as pr on n.run_id = pr.run_id
    left join picks as p on pr.run_id = p.run_id and pr.recommended_variant = p.variant
    left join series_keys as pk on p.run_id = pk.run_id and p.variant = pk.variant and pk.scope = 'perf'
),

final as (
    select
        series_key,
        hardware_id,
        config_name,
        run_id,
        started_at,
        reference_variant,
        recommended_variant,
        recommended_variant_key,
        load_req_s,
        retention,
        retention_ci_low,
        retention_ci_high,
        lag(recommended_variant) over w as previous_pick,
        case
            when row_number() over w = 1 then null
            else coalesce(recommended_variant_key, recommended_variant)
                is distinct from lag(coalesce(recommended_variant_key, recommended_variant)) over w
        end as pick_changed
    from chosen
    window w as (partition by series_key order by started_at, run_id)
)

select * from final
