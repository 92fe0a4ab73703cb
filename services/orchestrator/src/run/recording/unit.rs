//! The names of a run's durable points (units): `{kind}/{context}/{id}`,
//! `t/root.writer.1/3` being context `root.writer.1`'s third model turn. A
//! run makes a few for every turn and call it takes, and a resumed run, a
//! fork or a replay makes them again to look each up in its journal, so
//! they are built at their exact size, without `format!`.

/// `{kind}/{ctx}/{id}`.
pub fn unit(kind: &str, ctx: &str, id: &str) -> String {
    let mut unit = String::with_capacity(kind.len() + ctx.len() + id.len() + 2);
    unit.push_str(kind);
    unit.push('/');
    unit.push_str(ctx);
    unit.push('/');
    unit.push_str(id);
    unit
}

/// `{kind}/{ctx}/{n}` (a turn's units).
pub fn numbered(kind: &str, ctx: &str, n: u32) -> String {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    unit(kind, ctx, std::str::from_utf8(&digits[at..]).unwrap_or("0"))
}

#[cfg(test)]
mod tests {
    use super::{numbered, unit};

    #[test]
    fn units_read_as_format_writes_them() {
        assert_eq!(unit("c", "root.a.1", "root/2/x"), "c/root.a.1/root/2/x");
        for n in [0, 1, 9, 10, 99, 100, 4_294_967_295] {
            let u = numbered("t", "root", n);
            assert_eq!(u, format!("t/root/{n}"));
            assert_eq!(u.capacity(), u.len());
        }
    }
}
