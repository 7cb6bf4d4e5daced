//! Ordinary least squares of y on x with Student-t intervals, for the
//! interferometry experiment (CPI = m·MPKI + b over many code layouts).
//!
//! Written here rather than taken from a statistics crate: it is a few
//! dozen lines (sums of squares, and a t quantile from the regularised
//! incomplete beta function), and the unit tests below check it against
//! textbook values.

/// A fitted line y = slope·x + intercept, with what its intervals need.
#[derive(Clone, Debug)]
pub struct Fit {
    pub n: usize,
    pub slope: f64,
    pub intercept: f64,
    /// Coefficient of determination: the share of y's variance the line
    /// explains.
    pub r2: f64,
    /// Residual standard error, sqrt(SSE / (n − 2)).
    pub s: f64,
    pub x_mean: f64,
    pub y_mean: f64,
    /// Σ (x − x̄)².
    pub sxx: f64,
    /// Two-sided 95% quantile of Student's t with n − 2 degrees of freedom.
    pub t: f64,
}

impl Fit {
    pub fn predict(&self, x: f64) -> f64 {
        self.slope * x + self.intercept
    }
    /// 95% confidence interval of the slope.
    pub fn slope_ci(&self) -> (f64, f64) {
        let h = self.t * self.s / self.sxx.sqrt();
        (self.slope - h, self.slope + h)
    }
    /// 95% confidence interval of the intercept (the mean y at x = 0).
    pub fn intercept_ci(&self) -> (f64, f64) {
        let h = self.confidence_half_width(0.0);
        (self.intercept - h, self.intercept + h)
    }
    /// Half width of the 95% confidence band of the mean y at `x`.
    pub fn confidence_half_width(&self, x: f64) -> f64 {
        let d = x - self.x_mean;
        self.t * self.s * (1.0 / self.n as f64 + d * d / self.sxx).sqrt()
    }
    /// Half width of the 95% prediction interval of one new y at `x`.
    pub fn prediction_half_width(&self, x: f64) -> f64 {
        let d = x - self.x_mean;
        self.t * self.s * (1.0 + 1.0 / self.n as f64 + d * d / self.sxx).sqrt()
    }
}

/// Fits y = m·x + b to `points`; an error when there are fewer than three
/// points, a non-finite value, or no spread in x.
pub fn fit(points: &[(f64, f64)]) -> Result<Fit, String> {
    let n = points.len();
    if n < 3 {
        return Err(format!(
            "a fit with intervals needs 3 points or more, got {n}"
        ));
    }
    if points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return Err("a point is not a finite number".into());
    }
    let nf = n as f64;
    let x_mean = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let y_mean = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let sxx: f64 = points.iter().map(|p| (p.0 - x_mean).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - x_mean) * (p.1 - y_mean)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - y_mean).powi(2)).sum();
    if sxx <= 0.0 {
        return Err(format!(
            "all {n} points have the same x ({x_mean}): no slope to fit"
        ));
    }
    let slope = sxy / sxx;
    let intercept = y_mean - slope * x_mean;
    let sse: f64 = points
        .iter()
        .map(|p| (p.1 - (slope * p.0 + intercept)).powi(2))
        .sum();
    let r2 = if syy > 0.0 { 1.0 - sse / syy } else { 1.0 };
    Ok(Fit {
        n,
        slope,
        intercept,
        r2,
        s: (sse / (nf - 2.0)).sqrt(),
        x_mean,
        y_mean,
        sxx,
        t: t_quantile_975(nf - 2.0),
    })
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, nine terms).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1 − x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The continued fraction of the incomplete beta function (modified Lentz).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// The regularised incomplete beta function I_x(a, b).
fn inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// P(|T| > t) for Student's t with `df` degrees of freedom.
pub fn t_two_sided_tail(t: f64, df: f64) -> f64 {
    inc_beta(df / 2.0, 0.5, df / (df + t * t))
}

/// The t with P(|T| > t) = 0.05 (a 95% two-sided interval), by bisection.
pub fn t_quantile_975(df: f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 1000.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_two_sided_tail(mid, df) > 0.05 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_the_tables() {
        for (df, t) in [
            (1.0, 12.706_205),
            (2.0, 4.302_653),
            (3.0, 3.182_446),
            (10.0, 2.228_139),
            (30.0, 2.042_272),
            (98.0, 1.984_467),
            (198.0, 1.972_017),
        ] {
            let got = t_quantile_975(df);
            assert!(close(got, t, 1e-5), "df {df}: {got} instead of {t}");
        }
    }

    #[test]
    fn a_textbook_fit() {
        // x = 1..5, y = 2 4 5 4 5: y = 0.6x + 2.2, SSE 2.4, R² 0.6.
        let pts: Vec<(f64, f64)> = [2.0, 4.0, 5.0, 4.0, 5.0]
            .iter()
            .enumerate()
            .map(|(i, &y)| (i as f64 + 1.0, y))
            .collect();
        let f = fit(&pts).unwrap();
        assert!(close(f.slope, 0.6, 1e-12) && close(f.intercept, 2.2, 1e-12));
        assert!(close(f.r2, 0.6, 1e-12), "{}", f.r2);
        assert!(close(f.s, 0.8f64.sqrt(), 1e-12));
        // se(m) = s / sqrt(Sxx) = sqrt(0.08); t(3) = 3.182446.
        let (lo, hi) = f.slope_ci();
        assert!(
            close(hi - 0.6, 3.182_446 * 0.08f64.sqrt(), 1e-5),
            "{lo} {hi}"
        );
        // se(b) = s·sqrt(1/5 + 9/10) at x̄ = 3.
        let (lo, hi) = f.intercept_ci();
        assert!(
            close(hi - 2.2, 3.182_446 * (0.8f64 * 1.1).sqrt(), 1e-5),
            "{lo} {hi}"
        );
        assert!(close(
            f.prediction_half_width(3.0),
            3.182_446 * (0.8f64 * 1.2).sqrt(),
            1e-5
        ));
        assert!(f.prediction_half_width(0.0) > f.confidence_half_width(0.0));
    }

    #[test]
    fn an_exact_line_and_bad_inputs() {
        let f = fit(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0), (4.0, 9.0)]).unwrap();
        assert!(close(f.slope, 2.0, 1e-12) && close(f.intercept, 1.0, 1e-12));
        assert!(close(f.r2, 1.0, 1e-12) && f.s < 1e-9);
        assert!(fit(&[(0.0, 1.0), (1.0, 2.0)])
            .unwrap_err()
            .contains("3 points"));
        assert!(fit(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)])
            .unwrap_err()
            .contains("same x"));
        assert!(fit(&[(0.0, f64::NAN), (1.0, 2.0), (2.0, 3.0)]).is_err());
    }
}
