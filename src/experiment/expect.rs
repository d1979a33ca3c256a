//! The expected outcome of an experiment: checks such as `self_play(adalign) >= 2.5` or
//! `sustainability(shared) > sustainability(selfish) + 0.1`, each a comparison of two
//! arithmetic expressions over numbers and `measure(arm)` terms. A check is judged on
//! the measures' means over seeds (the verdict), and also seed by seed (how many seeds
//! agree), which the report prints beside it.
//!
//! Grammar: `check := expr ('>=' | '<=' | '>' | '<') expr`; `expr := term (('+' | '-')
//! term)*`; `term := atom (('*' | '/') atom)*`; `atom := number | '-' atom | name '(' arm ')'
//! | '(' expr ')'`.

use serde::Serialize;

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Op {
    /// `>=`
    Ge,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `<`
    Lt,
}

impl Op {
    /// As written.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Ge => ">=",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Lt => "<",
        }
    }
    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Ge => a >= b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Lt => a < b,
        }
    }
}

/// An arithmetic expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A number.
    Num(f64),
    /// `measure(arm)`.
    Measure {
        /// The measure.
        measure: String,
        /// The arm.
        arm: String,
    },
    /// `-e`.
    Neg(Box<Expr>),
    /// `a op b` with op one of `+ - * /`.
    Bin(Box<Expr>, char, Box<Expr>),
}

impl Expr {
    /// The value, reading each `measure(arm)` from `value` (`None` if one is missing).
    pub fn eval(&self, value: &dyn Fn(&str, &str) -> Option<f64>) -> Option<f64> {
        Some(match self {
            Expr::Num(x) => *x,
            Expr::Measure { measure, arm } => value(measure, arm)?,
            Expr::Neg(e) => -e.eval(value)?,
            Expr::Bin(a, op, b) => {
                let (a, b) = (a.eval(value)?, b.eval(value)?);
                match op {
                    '+' => a + b,
                    '-' => a - b,
                    '*' => a * b,
                    _ => a / b,
                }
            }
        })
    }
    fn uses<'a>(&'a self, out: &mut Vec<(&'a str, &'a str)>) {
        match self {
            Expr::Num(_) => {}
            Expr::Measure { measure, arm } => out.push((arm, measure)),
            Expr::Neg(e) => e.uses(out),
            Expr::Bin(a, _, b) => {
                a.uses(out);
                b.uses(out);
            }
        }
    }
}

/// One check of the expected outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// As written.
    pub text: String,
    /// Left side.
    pub lhs: Expr,
    /// The comparison.
    pub op: Op,
    /// Right side.
    pub rhs: Expr,
}

impl Check {
    /// The `(arm, measure)` pairs it reads.
    pub fn uses(&self) -> Vec<(&str, &str)> {
        let mut out = Vec::new();
        self.lhs.uses(&mut out);
        self.rhs.uses(&mut out);
        out
    }
    /// Both sides' values and whether the check holds (`None` if a value is missing or not
    /// finite).
    pub fn judge(&self, value: &dyn Fn(&str, &str) -> Option<f64>) -> Option<(f64, f64, bool)> {
        let (a, b) = (self.lhs.eval(value)?, self.rhs.eval(value)?);
        (a.is_finite() && b.is_finite()).then(|| (a, b, self.op.holds(a, b)))
    }
}

/// A parse error: the character offset in the check's text and the message.
pub type ParseError = (usize, String);

struct Parser<'a> {
    chars: Vec<char>,
    pos: usize,
    measures: &'a [&'a str],
    arms: &'a [&'a str],
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
            self.pos += 1;
        }
    }
    fn peek(&mut self) -> Option<char> {
        self.ws();
        self.chars.get(self.pos).copied()
    }
    fn ident(&mut self) -> String {
        let start = self.pos;
        while self
            .chars
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
        {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }
    fn expr(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.term()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            self.pos += 1;
            e = Expr::Bin(Box::new(e), op, Box::new(self.term()?));
        }
        Ok(e)
    }
    fn term(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.atom()?;
        while let Some(op @ ('*' | '/')) = self.peek() {
            self.pos += 1;
            e = Expr::Bin(Box::new(e), op, Box::new(self.atom()?));
        }
        Ok(e)
    }
    fn atom(&mut self) -> Result<Expr, ParseError> {
        let at = self.pos;
        match self.peek() {
            Some('-') => {
                self.pos += 1;
                Ok(Expr::Neg(Box::new(self.atom()?)))
            }
            Some('(') => {
                self.pos += 1;
                let e = self.expr()?;
                if self.peek() != Some(')') {
                    return Err((self.pos, "expected `)`".into()));
                }
                self.pos += 1;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => {
                let start = self.pos;
                while self.chars.get(self.pos).is_some_and(|c| {
                    c.is_ascii_digit()
                        || matches!(c, '.' | 'e' | 'E')
                        || ((*c == '-' || *c == '+')
                            && matches!(self.chars.get(self.pos - 1), Some('e' | 'E')))
                }) {
                    self.pos += 1;
                }
                let s: String = self.chars[start..self.pos].iter().collect();
                s.parse::<f64>()
                    .map(Expr::Num)
                    .map_err(|_| (start, format!("{s:?} is not a number")))
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let start = self.pos;
                let measure = self.ident();
                if !self.measures.contains(&measure.as_str()) {
                    return Err((
                        start,
                        format!(
                            "unknown measure {measure:?}; expected one of: {}",
                            self.measures.join(", ")
                        ),
                    ));
                }
                if self.peek() != Some('(') {
                    return Err((
                        self.pos,
                        format!("expected `(` and an arm after {measure}: {measure}(ARM)"),
                    ));
                }
                self.pos += 1;
                self.ws();
                let arm_at = self.pos;
                let arm = self.ident();
                if !self.arms.contains(&arm.as_str()) {
                    return Err((
                        arm_at,
                        format!(
                            "unknown arm {arm:?}; expected one of: {}",
                            self.arms.join(", ")
                        ),
                    ));
                }
                if self.peek() != Some(')') {
                    return Err((self.pos, format!("expected `)` after {measure}({arm}")));
                }
                self.pos += 1;
                Ok(Expr::Measure { measure, arm })
            }
            Some(c) => Err((
                self.pos,
                format!("unexpected {c:?}; expected a number, measure(arm) or `(`"),
            )),
            None => Err((
                at.max(self.pos),
                "the check ends early; expected a number or measure(arm)".into(),
            )),
        }
    }
}

/// Parses a check against the experiment's measure and arm names.
pub fn parse(text: &str, measures: &[&str], arms: &[&str]) -> Result<Check, ParseError> {
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
        measures,
        arms,
    };
    let lhs = p.expr()?;
    p.ws();
    let rest: String = p.chars[p.pos..].iter().take(2).collect();
    let op = if rest.starts_with(">=") {
        Op::Ge
    } else if rest.starts_with("<=") {
        Op::Le
    } else if rest.starts_with('>') {
        Op::Gt
    } else if rest.starts_with('<') {
        Op::Lt
    } else {
        return Err((p.pos, "expected a comparison: >=, <=, > or <".to_string()));
    };
    p.pos += op.symbol().len();
    let rhs = p.expr()?;
    if let Some(c) = p.peek() {
        return Err((p.pos, format!("unexpected {c:?} after the check")));
    }
    Ok(Check {
        text: text.to_string(),
        lhs,
        op,
        rhs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: [&str; 2] = ["self_play", "coop"];
    const A: [&str; 2] = ["aa", "naive"];

    #[test]
    fn checks_parse_with_arithmetic_and_judge() {
        let c = parse("self_play(aa) >= 2 * self_play(naive) + 0.5", &M, &A).expect("ok");
        let v = |m: &str, a: &str| match (m, a) {
            ("self_play", "aa") => Some(2.9),
            ("self_play", "naive") => Some(1.0),
            _ => None,
        };
        assert_eq!(c.judge(&v), Some((2.9, 2.5, true)));
        assert_eq!(c.uses(), [("aa", "self_play"), ("naive", "self_play")]);
        let c = parse("-(coop(aa) - 1) < -1e-1", &M, &A).expect("ok");
        assert_eq!(c.judge(&|_, _| Some(0.5)), Some((0.5, -0.1, false)));
        // A missing value gives no verdict.
        assert_eq!(c.judge(&|_, _| None), None);
    }

    #[test]
    fn errors_point_at_the_character() {
        let e = parse("self_play(ab) >= 1", &M, &A).unwrap_err();
        assert_eq!(e.0, 10);
        assert!(e.1.contains("unknown arm \"ab\""), "{}", e.1);
        let e = parse("selfplay(aa) >= 1", &M, &A).unwrap_err();
        assert_eq!(e.0, 0);
        assert!(e.1.contains("self_play, coop"), "{}", e.1);
        let e = parse("coop(aa) = 1", &M, &A).unwrap_err();
        assert_eq!(e.0, 9);
        assert!(e.1.contains("comparison"), "{}", e.1);
        let e = parse("coop(aa) >= ", &M, &A).unwrap_err();
        assert!(e.1.contains("ends early"), "{}", e.1);
        let e = parse("coop(aa) >= 1 1", &M, &A).unwrap_err();
        assert_eq!(e.0, 14);
        let e = parse("coop aa >= 1", &M, &A).unwrap_err();
        assert_eq!(e.0, 5);
    }
}
