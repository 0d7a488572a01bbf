//! `ken context QUERY`: context for a question, on a real project indexed by
//! the real binary; budgets are checked by counting the printed answer.

mod common;

use std::path::Path;

use common::*;
use ken::context::pack::count_tokens;
use serde_json::Value;

const QUERY: &str = "how is a discount code applied to a price";

/// A small shop: pricing calls discounts, checkout calls pricing, tests call
/// pricing, and one helper is copied verbatim into a vendored folder.
fn shop(root: &Path) {
    write(
        root,
        "shop/pricing.py",
        r#""""Prices of orders: discount codes and taxes."""

from shop.discounts import discount_percent
from shop.money import round_to_cents


def apply_discount(price, code):
    """Apply a discount code to a price and return the reduced price."""
    if price < 0:
        raise ValueError("a price cannot be negative")
    percent = discount_percent(code)
    if percent == 0:
        return price
    reduced = price * (100 - percent) / 100
    return round_to_cents(reduced)


def total_with_tax(price, region, rates):
    """The price with the sales tax of the region added."""
    rate = rates.get(region)
    if rate is None:
        raise KeyError(f"no tax rate for {region}")
    taxed = price * (1 + rate)
    return round_to_cents(taxed)
"#,
    );
    write(
        root,
        "shop/discounts.py",
        r#""""Discount codes and what they take off."""

CODES = {"SPRING": 10, "SUMMER": 15, "VIP": 30}


def discount_percent(code):
    """How many percent a discount code takes off a price (0 for an unknown code)."""
    if not code:
        return 0
    normalized = code.strip().upper()
    percent = CODES.get(normalized, 0)
    return min(percent, 90)
"#,
    );
    let money = r#""""Money arithmetic shared by the shop."""


def round_to_cents(amount):
    """Round an amount of money (after a discount code or a tax) to whole cents."""
    cents = int(amount * 100 + 0.5)
    whole = cents // 100
    rest = cents % 100
    value = whole + rest / 100
    return value
"#;
    write(root, "shop/money.py", money);
    write(root, "vendor/money_copy.py", money);
    write(
        root,
        "shop/checkout.py",
        r#""""Checkout: turns a cart into the amount to pay."""

from shop.pricing import apply_discount, total_with_tax


def checkout_total(cart, code, region, rates):
    """The amount to pay for a cart with a discount code, tax included."""
    subtotal = 0
    for item in cart:
        subtotal += item.price * item.quantity
    discounted = apply_discount(subtotal, code)
    return total_with_tax(discounted, region, rates)
"#,
    );
    write(
        root,
        "tests/test_pricing.py",
        r#"from shop.pricing import apply_discount


def test_spring_code_takes_ten_percent_off():
    price = 100.0
    reduced = apply_discount(price, "spring")
    assert reduced == 90.0
    assert price == 100.0


def test_unknown_code_changes_nothing():
    reduced = apply_discount(50.0, "nope")
    assert reduced == 50.0
"#,
    );
    write(
        root,
        "shop/reports.py",
        r#""""Monthly reports for the accounting team."""

from shop.pricing import apply_discount


def monthly_revenue_report(orders, month):
    """Revenue of one month, order by order, for the accounting export."""
    lines = []
    total = 0
    for order in orders:
        if order.month != month:
            continue
        paid = apply_discount(order.amount, order.voucher)
        total += paid
        lines.append(f"{order.number};{order.customer};{paid:.2f}")
    lines.append(f"total;;{total:.2f}")
    header = "number;customer;paid"
    return "\n".join([header] + lines)
"#,
    );
    write_unrelated(root, "misc", 12);
}

fn indexed_shop() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    shop(tmp.path());
    git(tmp.path(), &["init", "-q"]);
    ken_ok(tmp.path(), &["index", "--no-embed", "-q"]);
    tmp
}

/// `ken context --json` stdout, parsed, with the tokens it counts.
fn context(root: &Path, budget: usize, extra: &[&str]) -> (Value, usize) {
    let budget = budget.to_string();
    let mut args = vec!["context", QUERY, "--json", "--mode", "lexical", "--budget", &budget];
    args.extend_from_slice(extra);
    let out = ken_ok(root, &args);
    let value: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    (value, count_tokens(out.trim_end()))
}

fn pieces(answer: &Value) -> &Vec<Value> {
    answer["pack"]["pieces"].as_array().expect("pieces")
}

fn with_role<'a>(answer: &'a Value, role: &str) -> Vec<&'a Value> {
    pieces(answer).iter().filter(|p| p["role"] == role).collect()
}

fn all_text(answer: &Value) -> String {
    pieces(answer)
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_answer_holds_the_definition_its_callers_callees_and_tests() {
    let tmp = indexed_shop();
    let (answer, tokens) = context(tmp.path(), 3000, &[]);
    assert_eq!(answer["query"], QUERY);
    assert_eq!(answer["budget"], 3000);
    assert_eq!(
        answer["tokens"].as_u64().unwrap() as usize,
        tokens,
        "the answer counts itself"
    );
    let first = &pieces(&answer)[0];
    assert_eq!(first["role"], "match", "{answer:#}");
    assert_eq!(first["path"], "shop/pricing.py");
    assert!(
        first["text"]
            .as_str()
            .unwrap()
            .contains("def apply_discount(price, code):")
            && first["text"]
                .as_str()
                .unwrap()
                .contains("reduced = price * (100 - percent) / 100"),
        "the top definition's body: {first:#}"
    );
    let text = all_text(&answer);
    // The call-site lines of a caller, with the caller named (in a caller piece or a result holding them).
    assert!(
        pieces(&answer).iter().any(|p| p["path"] == "shop/reports.py"
            && p["text"]
                .as_str()
                .unwrap()
                .contains("paid = apply_discount(order.amount, order.voucher)")
            && p["label"]
                .as_str()
                .unwrap()
                .contains("monthly_revenue_report calls apply_discount")),
        "{answer:#}"
    );
    // Another caller's call-site line (a caller piece, or inside a result that holds it).
    assert!(
        pieces(&answer).iter().any(|p| p["path"] == "shop/checkout.py"
            && p["text"]
                .as_str()
                .unwrap()
                .contains("discounted = apply_discount(subtotal, code)")),
        "{answer:#}"
    );
    // A callee's signature.
    assert!(text.contains("def discount_percent(code):"), "{answer:#}");
    assert!(
        pieces(&answer)
            .iter()
            .any(|p| p["path"] == "shop/discounts.py" && p["label"].as_str().unwrap().contains("called by")),
        "{answer:#}"
    );
    // A test that calls it.
    assert!(
        pieces(&answer).iter().any(|p| p["path"] == "tests/test_pricing.py"
            && p["text"]
                .as_str()
                .unwrap()
                .contains("apply_discount(price, \"spring\")")),
        "{answer:#}"
    );
    // Several files, and identical code only once.
    let mut files: Vec<&str> = pieces(&answer).iter().map(|p| p["path"].as_str().unwrap()).collect();
    files.sort_unstable();
    files.dedup();
    assert!(files.len() >= 4, "{files:?}");
    assert_eq!(text.matches("def round_to_cents(amount):").count(), 1, "{answer:#}");
    // Overlapping spans are merged: no line of a file is shown twice.
    let mut shown: Vec<(String, usize)> = Vec::new();
    for p in pieces(&answer) {
        let (a, b) = p["lines"].as_str().unwrap().split_once('-').unwrap();
        for line in a.parse::<usize>().unwrap()..=b.parse().unwrap() {
            let key = (p["path"].as_str().unwrap().to_string(), line);
            assert!(!shown.contains(&key), "line {key:?} twice: {answer:#}");
            shown.push(key);
        }
    }
}

#[test]
fn budgets_are_never_exceeded_and_what_did_not_fit_is_named() {
    let tmp = indexed_shop();
    let mut previous = 0;
    for budget in [500, 1000, 3000, 8000] {
        let (answer, tokens) = context(tmp.path(), budget, &[]);
        assert!(tokens <= budget, "{tokens} > {budget}: {answer:#}");
        assert_eq!(answer["tokens"].as_u64().unwrap() as usize, tokens);
        let pack_tokens = answer["pack"]["tokens"].as_u64().unwrap() as usize;
        // The pack's own count covers its pieces and its left-out line, within the answer's.
        let pieces_tokens = count_tokens(&serde_json::to_string(pieces(&answer)).unwrap());
        assert!(
            pieces_tokens <= pack_tokens && pack_tokens <= tokens,
            "pack.tokens {pack_tokens}: pieces {pieces_tokens}, answer {tokens}"
        );
        assert!(
            tokens >= previous,
            "a larger budget gives no less: {tokens} < {previous}"
        );
        previous = tokens;
    }
    let (small, tokens) = context(tmp.path(), 500, &[]);
    // The small budget is used, and what is left out is said with how to get it.
    assert!(tokens > 250, "{tokens} of 500 used: {small:#}");
    let left = small["pack"]["left_out"].as_str().expect("left_out at 500 tokens");
    assert!(
        left.starts_with("left out: ") && left.contains("larger budget"),
        "{left}"
    );
    let first_left = left.trim_start_matches("left out: ").split(": ").nth(1).unwrap();
    assert!(first_left.contains(".py:"), "names the pieces: {left}");
    let (large, _) = context(tmp.path(), 8000, &[]);
    assert!(
        large["pack"]["left_out"].is_null(),
        "everything fits in 8000: {large:#}"
    );
}

#[test]
fn budgets_outside_500_to_16000_and_empty_queries_are_clear_errors() {
    let tmp = indexed_shop();
    for budget in ["100", "20000"] {
        let out = ken(tmp.path(), &["context", QUERY, "--json", "--budget", budget]);
        assert!(!out.status.success());
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("between 500 and 16000 tokens"), "{err}");
        assert!(err.contains(budget), "{err}");
    }
    let out = ken(tmp.path(), &["context", "   ", "--json"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("query is empty"));
}

#[test]
fn knowledge_base_docs_are_packed_with_the_code() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("project");
    let docs = tmp.path().join("handbook");
    shop(&root);
    git(&root, &["init", "-q"]);
    write(
        &docs,
        "discounts.md",
        "# Discount codes\n\nA discount code is applied to the price before tax: SPRING takes ten percent off,\n\
         VIP thirty. An unknown discount code leaves the price as it is.\n",
    );
    ken_ok(&root, &["index", "--no-embed", "-q"]);
    ken_ok(&root, &["kb", "add", docs.to_str().unwrap(), "--no-embed"]);
    let (answer, tokens) = context(&root, 3000, &[]);
    assert!(tokens <= 3000);
    let docs = with_role(&answer, "doc");
    assert!(
        docs.iter()
            .any(|p| p["path"].as_str().unwrap().ends_with("handbook/discounts.md")
                && p["text"].as_str().unwrap().contains("SPRING takes ten percent off")),
        "{answer:#}"
    );
    assert_eq!(pieces(&answer)[0]["role"], "match", "code first: {answer:#}");
}

#[test]
fn the_text_output_shows_each_piece_and_the_tokens_used() {
    let tmp = indexed_shop();
    let out = ken_ok(tmp.path(), &["context", QUERY, "--mode", "lexical", "--budget", "1000"]);
    assert!(out.contains("── shop/pricing.py:"), "{out}");
    assert!(out.contains("[match]") && out.contains("[callee]"), "{out}");
    assert!(out.contains("of 1000 tokens"), "{out}");
}

/// With the built-in model (fetched by `ken model fetch`), the hybrid answer
/// finds the same definition; skipped where the model is absent.
#[test]
fn hybrid_mode_with_the_model() {
    let model = ken_ok(Path::new("."), &["model", "path"]);
    if !Path::new(model.trim()).join("model.safetensors").exists() {
        eprintln!("skipped: the built-in model is not fetched");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    shop(tmp.path());
    git(tmp.path(), &["init", "-q"]);
    ken_ok(tmp.path(), &["index", "-q"]);
    let out = ken_ok(tmp.path(), &["context", QUERY, "--json", "--budget", "2000"]);
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert!(count_tokens(out.trim_end()) <= 2000);
    assert!(answer["notice"].is_null(), "hybrid, not a fallback: {answer:#}");
    assert!(
        all_text(&answer).contains("def apply_discount(price, code):"),
        "{answer:#}"
    );
    assert!(
        all_text(&answer).contains("apply_discount(order.amount, order.voucher)"),
        "{answer:#}"
    );
}

/// Without embeddings the default (hybrid) mode falls back to lexical, as search does, and says so.
#[test]
fn without_embeddings_the_default_mode_falls_back_to_lexical() {
    let tmp = indexed_shop();
    let out = ken_ok(tmp.path(), &["context", QUERY, "--json", "--budget", "1000"]);
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert!(
        all_text(&answer).contains("def apply_discount(price, code):"),
        "{answer:#}"
    );
    assert!(
        answer["notice"].as_str().unwrap_or_default().contains("lexical"),
        "{answer:#}"
    );
}
