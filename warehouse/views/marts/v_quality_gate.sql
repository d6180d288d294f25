-- v_quality_gate: the quality gate of the decision, one row per (run_id, ok variant, gating metric of
-- v_decision). A variant passes a metric when the lower bound of its retention interval clears the target,
-- fails when the upper bound is below it, and is 'not_enough_evidence' otherwise (or when fewer than
-- min_samples pairs, no interval, or no paired samples exist), with the paired samples a decision would
-- need. The reference passes by definition (retention 1). Columns:
--   run_id, variant, is_reference, gate_metric ('suite.metric'), unit, higher_is_better
--   reference_value, value, delta  over the samples both variants have (quality_deltas), metric's unit
--   ci_low, ci_high, confidence    the paired interval of delta (tasks/quality/deltas.py)
--   n                              paired samples
--   n_lost, n_gained               right/wrong metrics (mean of 0/1 scores over the whole suite): pairs the
--                                  reference got right and the variant wrong, and the reverse
--   retention                      value / reference (higher-is-better), reference / value (lower-is-better)
--   retention_ci_low, _ci_high     the delta interval mapped to retention (the retention_ci CTE, the one
--                                  place this mapping lives; the reference value is taken as known; a
--                                  lower bound below 0 is clipped to 0)
--   retention_target               from v_decision (0.99: MLPerf's 99 % class)
--   gate                           pass | fail | not_enough_evidence
--   gate_reason                    why, in words
--   n_needed                       paired samples for a decided gate at the observed effect: a normal-
--                                  approximation sample size at the interval's confidence and v_decision's
--                                  power, the per-pair spread from the observed discordance (right/wrong
--                                  metrics) or else from the interval's width; NULL when the gate is decided,
--                                  nothing was measured, or the estimate sits exactly on the target

with decision as (
    select run_id, unnest(gate_metrics) as gate_metric, retention_target, min_samples, power
    from v_decision
),

candidates as (
    select v.run_id, v.variant, v.is_reference, d.gate_metric, d.retention_target, d.min_samples, d.power
    from variants as v
    join decision as d on v.run_id = d.run_id
    where v.status = 'ok'
),

-- right/wrong pairs of suites scored 0/1 per sample, for the spread of the per-pair difference
discordance as (
    select
        s.run_id,
        s.variant,
        s.suite,
        count(*) as n_pairs,
        count(*) filter (where r.score = 1 and s.score = 0) as n_lost,
        count(*) filter (where r.score = 0 and s.score = 1) as n_gained
    from quality_samples as s
    join runs as ru on s.run_id = ru.run_id
    join quality_samples as r
        on r.run_id = s.run_id and r.suite = s.suite and r.sample_id = s.sample_id
        and r.variant = ru.reference_variant
    where s.variant <> r.variant
    group by s.run_id, s.variant, s.suite
    having bool_and(s.score in (0, 1) and r.score in (0, 1))
),

joined as (
    select
        c.*,
        d.suite,
        d.unit,
        coalesce(d.higher_is_better, true) as higher_is_better,
        d.reference_value,
        d.value,
        d.delta,
        d.ci_low,
        d.ci_high,
        d.confidence,
        coalesce(d.n, 0) as n,
        case when sc.sample_stat = 'mean(score)' and k.n_pairs = d.n then k.n_lost end as n_lost,
        case when sc.sample_stat = 'mean(score)' and k.n_pairs = d.n then k.n_gained end as n_gained
    from candidates as c
    left join quality_deltas as d
        on c.run_id = d.run_id and c.variant = d.variant and d.suite || '.' || d.metric = c.gate_metric
    left join quality_scores as sc
        on d.run_id = sc.run_id and d.variant = sc.variant and d.suite = sc.suite and d.metric = sc.metric
    left join discordance as k on d.run_id = k.run_id and d.variant = k.variant and d.suite = k.suite
),

-- THE mapping from a delta interval to a retention interval (v_retention's definition of retention).
retention_ci as (
    select
        *,
        case
            when reference_value is null or reference_value <= 0 then null
            when higher_is_better then value / reference_value
            else reference_value / nullif(value, 0)
        end as retention,
        case
            when reference_value is null or reference_value <= 0 then null
            when higher_is_better then greatest((reference_value + ci_low) / reference_value, 0)
            when reference_value + ci_high > 0 then reference_value / (reference_value + ci_high)
        end as retention_ci_low,
        case
            when reference_value is null or reference_value <= 0 then null
            when higher_is_better then (reference_value + ci_high) / reference_value
            when reference_value + ci_low > 0 then reference_value / (reference_value + ci_low)
        end as retention_ci_high,
        -- the delta at which retention equals the target
        case
            when higher_is_better then (retention_target - 1) * reference_value
            else reference_value * (1 / retention_target - 1)
        end as delta_at_target
    from joined
),

-- z quantiles by Abramowitz & Stegun 26.2.23 (|error| < 4.5e-4): t = sqrt(-2 ln(1 - p)), p in (0.5, 1)
quantiles as (
    select
        *,
        sqrt(-2 * ln(1 - (1 + confidence) / 2)) as t_a,
        sqrt(-2 * ln(1 - power)) as t_b
    from retention_ci
),

sized as (
    select
        *,
        t_a - (2.515517 + 0.802853 * t_a + 0.010328 * t_a ^ 2) / (1 + 1.432788 * t_a + 0.189269 * t_a ^ 2 + 0.001308 * t_a ^ 3)
            as z_a,
        t_b - (2.515517 + 0.802853 * t_b + 0.010328 * t_b ^ 2) / (1 + 1.432788 * t_b + 0.189269 * t_b ^ 2 + 0.001308 * t_b ^ 3)
            as z_b
    from quantiles
),

spread as (
    select
        *,
        case
            when n_lost is not null
                then sqrt(greatest((n_lost + n_gained) / n - ((n_gained - n_lost) / n) ^ 2, 0))
            when ci_low is not null and n > 0 then sqrt(n) * (ci_high - ci_low) / (2 * z_a)
        end as sd_per_pair
    from sized
),

estimated as (
    select
        *,
        case
            when sd_per_pair is null or abs(delta - delta_at_target) = 0 then null
            else ceil(((z_a + z_b) * sd_per_pair / abs(delta - delta_at_target)) ^ 2)
        end as n_estimate
    from spread
),

gated as (
    select
        *,
        case
            when is_reference then 'pass'
            when delta is null or n = 0 or retention is null or ci_low is null or n < min_samples then 'not_enough_evidence'
            when retention_ci_low >= retention_target - 1e-12 then 'pass'
            when retention_ci_high < retention_target - 1e-12 then 'fail'
            else 'not_enough_evidence'
        end as gate
    from estimated
),

final as (
    select
        run_id,
        variant,
        is_reference,
        gate_metric,
        unit,
        higher_is_better,
        case when is_reference then null else reference_value end as reference_value,
        value,
        delta,
        ci_low,
        ci_high,
        confidence,
        n,
        n_lost,
        n_gained,
        case when is_reference then 1.0 else retention end as retention,
        case when is_reference then 1.0 else retention_ci_low end as retention_ci_low,
        case when is_reference then 1.0 else retention_ci_high end as retention_ci_high,
        retention_target,
        gate,
        case
            when is_reference then 'the reference'
            when delta is null or n = 0 then 'not measured: no paired samples of ' || gate_metric
            when retention is null then 'retention undefined: the reference scores ' || coalesce(reference_value::varchar, 'NULL')
            when ci_low is null then 'no interval: the metric has no per-sample statistic'
            when n < min_samples then printf('only %d paired samples (quality.min_samples %d)', n, min_samples)
            when gate = 'pass' then printf('retention CI low %.2f %% >= %g %%', retention_ci_low * 100, retention_target * 100)
            when gate = 'fail' then printf('retention CI high %.2f %% < %g %%', retention_ci_high * 100, retention_target * 100)
            else printf('retention CI %.2f-%.2f %% straddles %g %%', retention_ci_low * 100,
                        coalesce(retention_ci_high, 'infinity'::double) * 100, retention_target * 100)
        end as gate_reason,
        case
            when gate <> 'not_enough_evidence' or is_reference or n_estimate is null then null
            else greatest(n_estimate, min_samples, n + 1)::bigint
        end as n_needed
    from gated
)

select * from final
