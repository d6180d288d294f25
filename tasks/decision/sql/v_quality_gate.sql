-- v_quality_gate: the quality gate of the decision, one row per (run_id, ok variant, gating metric of
-- v_decision). The bounds are computed in Python with the variant's deltas and stored in quality_deltas
-- (tasks/decision/gate.py: retention_ci_low/_high, identity_*); the `gated` CTE below is the rule that
-- compares them with the target, the same rule as tasks/decision/gate.py:judge (a test holds the two
-- equal), which the nightly's adaptive suites and benchmarks/gate_error.py use. A variant passes a metric
-- when the gate's lower bound clears the threshold, fails when its upper bound is below it, and is
-- 'not_enough_evidence' otherwise (or with fewer than min_samples pairs, no interval, no bound, or no
-- paired samples), with the samples a decision would need. The reference passes by definition. Columns:
--   run_id, variant, is_reference, gate_metric ('suite.metric'), unit, higher_is_better
--   reference_value, value, delta  over the samples both variants have (quality_deltas), metric's unit
--   ci_low, ci_high, confidence    the paired interval of delta and its overall level (tasks/quality/deltas.py)
--   look_confidence, looks, looks_planned   the level of the look it was taken at: an adaptive suite spends
--                                  1 - confidence over its planned looks (looks taken of looks planned)
--   n                              paired samples
--   n_lost, n_gained               0/1 metrics: pairs the reference got right and the variant wrong (an errored
--                                  request counts as wrong), and the reverse
--   retention                      value / reference (higher-is-better), reference / value (lower-is-better)
--   retention_ci_low, _ci_high     the delta interval as retention (quality_deltas; the reference value taken
--                                  as known, see docs/decision.md); NULL high: unbounded
--   retention_target               from v_decision (0.99: MLPerf's 99 % class)
--   margin_points                  from v_decision: the non-inferiority margin for fraction metrics (points)
--   gate_basis                     retention | margin_points (a fraction metric with margin_points: the delta
--                                  against -margin) | identity (decision.identity_gate and identity evidence)
--   identity_n, identity_same, identity_flip_high, identity_retention_low   the identity evidence (quality_deltas)
--   gate                           pass | fail | not_enough_evidence
--   gate_reason                    why, in words
--   n_needed                       paired samples to decide at the observed effect with v_decision's power:
--                                  for a 0/1 metric judged at the run's own threshold, the exact figure under the
--                                  design in use (quality_deltas.n_needed: the last look of the adaptive suite's
--                                  looks, or the fixed n; tasks/decision/design.py); otherwise (another target, other
--                                  statistics) a normal-approximation sample size at `confidence`, the per-pair
--                                  spread from the observed discordance or else from the interval's width
--   n_needed_if_equal              paired samples for a truly equal variant (delta 0, the same discordance) to pass
--                                  at that power: exact as above (quality_deltas.n_needed_if_equal), else the
--                                  normal approximation; with no discordant pair, the n at which Tango's interval
--                                  of none differing clears the threshold
--   n_needed_method                'exact, the design in use' | 'normal approximation, fixed sample'; NULL when
--                                  decided
--   identity_n_needed              identity basis: identical greedy outputs (none differing) that would pass
--   (n_needed, n_needed_if_equal, identity_n_needed: NULL when the gate is decided or they do not apply)

with decision as (
    select run_id, unnest(gate_metrics) as gate_metric, retention_target, margin_points, identity_gate, min_samples,
        power
    from v_decision
),

candidates as (
    select v.run_id, v.variant, v.is_reference, d.gate_metric, d.retention_target, d.margin_points, d.identity_gate,
        d.min_samples, d.power
    from variants as v
    join decision as d on v.run_id = d.run_id
    where v.status = 'ok'
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
        d.look_confidence,
        d.looks,
        d.looks_planned,
        coalesce(d.n, 0) as n,
        d.n_lost,
        d.n_gained,
        d.retention_ci_low,
        d.retention_ci_high,
        d.identity_n,
        d.identity_same,
        d.identity_flip_high,
        d.identity_retention_low,
        d.n_needed_threshold,
        d.n_needed_if_equal as design_n_if_equal,
        d.n_needed as design_n_needed,
        d.method,
        case
            when d.reference_value is null or d.reference_value <= 0 then null
            when coalesce(d.higher_is_better, true) then d.value / d.reference_value
            else d.reference_value / nullif(d.value, 0)
        end as retention,
        case when c.margin_points is not null and d.unit = 'fraction' then c.margin_points / 100 end as margin
    from candidates as c
    left join quality_deltas as d
        on c.run_id = d.run_id and c.variant = d.variant and d.suite || '.' || d.metric = c.gate_metric
),

-- The gate's scale: retention against the target, or (margin_points, fraction metrics) the delta signed so
-- that higher is better against -margin.
scaled as (
    select
        *,
        case
            when identity_gate and identity_flip_high is not null then 'identity'
            when margin is not null then 'margin_points'
            else 'retention'
        end as gate_basis,
        case when margin is not null then -margin else retention_target end as threshold,
        case when margin is null then retention_ci_low when higher_is_better then ci_low else -ci_high end as bound_low,
        case when margin is null then retention_ci_high when higher_is_better then ci_high else -ci_low end as bound_high,
        case when margin is not null then -identity_flip_high else identity_retention_low end as identity_low,
        -- the delta at which the gate's threshold is met
        case
            when margin is not null then case when higher_is_better then -margin else margin end
            when higher_is_better then (retention_target - 1) * reference_value
            else reference_value * (1 / retention_target - 1)
        end as delta_at_target
    from joined
),

-- THE rule (tasks/decision/gate.py:judge is the same, branch for branch).
gated as (
    select
        *,
        case
            when is_reference then 'pass'
            when delta is null or n = 0 then 'not_enough_evidence'
            when gate_basis = 'identity' and identity_low >= threshold - 1e-12 then 'pass'
            when ci_low is null or n < min_samples then 'not_enough_evidence'
            when gate_basis <> 'identity' and bound_low >= threshold - 1e-12 then 'pass'
            when bound_high < threshold - 1e-12 then 'fail'
            else 'not_enough_evidence'
        end as gate
    from scaled
),

-- z quantiles by Abramowitz & Stegun 26.2.23 (|error| < 4.5e-4): t = sqrt(-2 ln(1 - p)), p in (0.5, 1)
quantiles as (
    select
        *,
        sqrt(-2 * ln(1 - (1 + confidence) / 2)) as t_a,
        sqrt(-2 * ln(1 - power)) as t_b
    from gated
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
        -- per-pair sd of (variant - reference) at the observed effect, and at delta 0 with the same discordance
        case
            when n_lost is not null and n > 0
                then sqrt(greatest((n_lost + n_gained) / n - ((n_gained - n_lost) / n) ^ 2, 0))
            when ci_low is not null and n > 0 then sqrt(n) * (ci_high - ci_low) / (2 * z_a)
        end as sd_per_pair,
        case
            when n_lost is not null and n > 0 then sqrt((n_lost + n_gained) / n)
            when ci_low is not null and n > 0 then sqrt(n) * (ci_high - ci_low) / (2 * z_a)
        end as sd_if_equal
    from sized
),

estimated as (
    select
        *,
        case
            -- an observed change on the threshold (to rounding: -0.02 from 69/71 vs 71/71 is 1e-17 off a 2-point
            -- margin) needs no finite n; its 1e32 would not fit n_needed's bigint
            when sd_per_pair is null or sd_per_pair = 0 or abs(delta - delta_at_target) < 1e-9 then null
            else ceil(((z_a + z_b) * sd_per_pair / abs(delta - delta_at_target)) ^ 2)
        end as n_estimate,
        case
            when sd_if_equal is null or delta_at_target is null or delta_at_target = 0 then null
            when sd_if_equal = 0 then ceil(z_a ^ 2 * (1 / abs(delta_at_target) - 1))
            else ceil(((z_a + z_b) * sd_if_equal / abs(delta_at_target)) ^ 2)
        end as n_equal_estimate,
        case
            when delta_at_target is null or abs(delta_at_target) = 0 or abs(delta_at_target) >= 1 then null
            else ceil(ln((1 - confidence) / 2) / ln(1 - abs(delta_at_target)))
        end as identity_estimate,
        -- the exact figures under the design in use, where they were computed for this threshold
        coalesce(abs(n_needed_threshold - delta_at_target) < 1e-9, false) as design_applies
    from spread
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
        look_confidence,
        looks,
        looks_planned,
        n,
        n_lost,
        n_gained,
        case when is_reference then 1.0 else retention end as retention,
        case when is_reference then 1.0 else retention_ci_low end as retention_ci_low,
        case when is_reference then 1.0 else retention_ci_high end as retention_ci_high,
        retention_target,
        margin_points,
        case when is_reference then 'reference' else gate_basis end as gate_basis,
        identity_n,
        identity_same,
        identity_flip_high,
        identity_retention_low,
        gate,
        case
            when is_reference then 'the reference'
            when delta is null or n = 0 then 'not measured: no paired samples of ' || gate_metric
            when gate = 'pass' and gate_basis = 'identity' and margin is not null
                then printf('%d of %d greedy outputs identical to plain decoding: at most %.2f %% differ, a change of '
                            'at most %.2f points (margin %g points)', identity_same, identity_n, identity_flip_high * 100,
                            identity_flip_high * 100, margin_points)
            when gate = 'pass' and gate_basis = 'identity'
                then printf('%d of %d greedy outputs identical to plain decoding: at most %.2f %% differ, so retention '
                            '>= %.2f %% (>= %g %%)', identity_same, identity_n, identity_flip_high * 100,
                            identity_retention_low * 100, retention_target * 100)
            when retention is null and margin is null
                then 'retention undefined: the reference scores ' || coalesce(reference_value::varchar, 'NULL')
            when ci_low is null then 'no interval: the metric has no per-sample statistic'
            when n < min_samples then printf('only %d paired samples (quality.min_samples %d)', n, min_samples)
            when bound_low is null and bound_high is null
                then 'no gate bound: ' || coalesce(method, 'none recorded (a row loaded before migration 011)')
            when gate = 'pass' and margin is not null
                then printf('change CI low %+.2f points >= -%g points', bound_low * 100, margin_points)
            when gate = 'pass' then printf('retention CI low %.2f %% >= %g %%', retention_ci_low * 100, retention_target * 100)
            when gate = 'fail' and margin is not null
                then printf('change CI high %+.2f points < -%g points', bound_high * 100, margin_points)
            when gate = 'fail' then printf('retention CI high %.2f %% < %g %%', retention_ci_high * 100, retention_target * 100)
            when gate_basis = 'identity'
                then printf('identity: %d of %d greedy outputs identical bounds the flip rate at %.2f %% only', identity_same,
                            identity_n, identity_flip_high * 100)
            when margin is not null
                then printf('change CI %+.2f to %+.2f points straddles the margin of -%g points', bound_low * 100,
                            bound_high * 100, margin_points)
            else printf('retention CI %.2f-%.2f %% straddles %g %%', retention_ci_low * 100,
                        coalesce(retention_ci_high, 'infinity'::double) * 100, retention_target * 100)
        end as gate_reason,
        case
            when gate <> 'not_enough_evidence' or is_reference or gate_basis = 'identity' then null
            when design_applies and design_n_needed is not null then greatest(design_n_needed, n + 1)::bigint
            when n_estimate is null then null
            else greatest(n_estimate, min_samples, n + 1)::bigint
        end as n_needed,
        case
            when gate <> 'not_enough_evidence' or is_reference or gate_basis = 'identity' then null
            when design_applies and design_n_if_equal is not null then design_n_if_equal::bigint
            when n_equal_estimate is null then null
            else greatest(n_equal_estimate, min_samples)::bigint
        end as n_needed_if_equal,
        case when gate = 'not_enough_evidence' and not is_reference and gate_basis <> 'identity'
            then case when design_applies then 'exact, the design in use' else 'normal approximation, fixed sample' end
        end as n_needed_method,
        case
            when gate <> 'not_enough_evidence' or gate_basis <> 'identity' or identity_estimate is null then null
            else greatest(identity_estimate, 1)::bigint
        end as identity_n_needed
    from estimated
)

select * from final
