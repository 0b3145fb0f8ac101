//! Unit tests: what the grammar accepts, how it normalizes, and where and why it refuses.

use super::*;
use crate::args::types::TypeKind;

/// The position and reason `spec` is refused with.
#[track_caller]
fn refused(spec: &str) -> (usize, SyntaxReason) {
    match split_signature(spec) {
        Err(SignatureError::Syntax { text, at, reason }) => {
            assert_eq!(text, spec);
            (at, reason)
        }
        other => panic!("`{spec}` was not refused: {other:?}"),
    }
}

#[track_caller]
fn accepted(spec: &str) -> Signature {
    match split_signature(spec) {
        Ok((_, Some(sig))) => sig,
        other => panic!("`{spec}` was not accepted: {other:?}"),
    }
}

fn tok(t: &str) -> Found {
    Found::Token(t.into())
}

#[test]
fn the_issue_inputs_are_refused_where_they_go_wrong() {
    // Issue 19: each of these was stored as the hook's signature.
    assert_eq!(
        refused("step(int a))"),
        (11, SyntaxReason::TrailingText { found: ")".into() })
    );
    assert_eq!(
        refused("step(int a[)"),
        (
            11,
            SyntaxReason::Expected {
                expected: Expected::ArraySize,
                found: tok(")")
            }
        )
    );
    assert_eq!(
        refused("step(int 3x)"),
        (9, SyntaxReason::NotAName { found: "3x".into() })
    );
    assert_eq!(
        refused("step(long a;)"),
        (11, SyntaxReason::UnexpectedChar { ch: ';' })
    );
    assert_eq!(refused("step(void, int)"), (5, SyntaxReason::VoidNotAlone));
}

#[test]
fn more_invalid_lists_are_refused_at_their_first_error() {
    use SyntaxReason as R;
    let cases: Vec<(&str, usize, SyntaxReason)> = vec![
        ("f(...)", 2, R::VariadicWithoutNamed),
        ("f(int, ..., long)", 10, R::VariadicNotLast),
        (
            "f(int, ... x)",
            11,
            R::Expected {
                expected: Expected::CommaOrClose,
                found: tok("x"),
            },
        ),
        ("f(int", 5, R::Unclosed),
        ("f(int a) x", 9, R::TrailingText { found: "x".into() }),
        ("f(int a);", 8, R::UnexpectedChar { ch: ';' }),
        ("f(int) (long)", 7, R::TrailingText { found: "(".into() }),
        ("(int)", 0, R::NoName),
        ("  (int)", 2, R::NoName),
        ("f int)", 5, R::StrayClose),
        ("f(int, , long)", 7, R::EmptyParameter),
        ("f(int,)", 6, R::EmptyParameter),
        ("f(,int)", 2, R::EmptyParameter),
        (
            "f(frobnicate)",
            2,
            R::UnknownType {
                word: "frobnicate".into(),
            },
        ),
        ("f(int, foo bar)", 7, R::UnknownType { word: "foo".into() }),
        (
            "f(long char c)",
            7,
            R::BadCombination {
                word: "char".into(),
                with: "long".into(),
            },
        ),
        (
            "f(long long long x)",
            12,
            R::BadCombination {
                word: "long".into(),
                with: "long long".into(),
            },
        ),
        (
            "f(signed double d)",
            9,
            R::BadCombination {
                word: "double".into(),
                with: "signed".into(),
            },
        ),
        (
            "f(unsigned signed x)",
            11,
            R::BadCombination {
                word: "signed".into(),
                with: "unsigned".into(),
            },
        ),
        (
            "f(size_t int n)",
            9,
            R::BadCombination {
                word: "int".into(),
                with: "size_t".into(),
            },
        ),
        (
            "f(int struct s)",
            6,
            R::BadCombination {
                word: "struct".into(),
                with: "int".into(),
            },
        ),
        (
            "f(struct *p)",
            9,
            R::Expected {
                expected: Expected::Tag,
                found: tok("*"),
            },
        ),
        (
            "f(struct int x)",
            9,
            R::Expected {
                expected: Expected::Tag,
                found: tok("int"),
            },
        ),
        (
            "f(const const int x)",
            8,
            R::DuplicateQualifier {
                word: "const".into(),
            },
        ),
        (
            "f(char *const const p)",
            14,
            R::DuplicateQualifier {
                word: "const".into(),
            },
        ),
        ("f(restrict int *p)", 2, R::RestrictNotOnPointer),
        (
            "f(register int x)",
            2,
            R::Unsupported {
                word: "register".into(),
            },
        ),
        (
            "f(_Complex double z)",
            2,
            R::Unsupported {
                word: "_Complex".into(),
            },
        ),
        ("f(int for)", 6, R::KeywordAsName { word: "for".into() }),
        (
            "f(int *long)",
            7,
            R::KeywordAsName {
                word: "long".into(),
            },
        ),
        (
            "f(int size_t)",
            6,
            R::TypeAsName {
                word: "size_t".into(),
            },
        ),
        (
            "f(int a, long a)",
            14,
            R::DuplicateName { name: "a".into() },
        ),
        ("f(const *p)", 8, R::MissingType),
        (
            "f(struct t *a, union t *b)",
            15,
            R::TagKindConflict {
                tag: "t".into(),
                first: "struct".into(),
            },
        ),
        (
            "f(*p)",
            2,
            R::Expected {
                expected: Expected::Parameter,
                found: tok("*"),
            },
        ),
        (
            "f(42)",
            2,
            R::Expected {
                expected: Expected::Parameter,
                found: tok("42"),
            },
        ),
        ("f(void x)", 2, R::VoidNamed),
        ("f(const void)", 8, R::VoidQualified),
        ("f(int, void)", 7, R::VoidNotAlone),
        ("f(void, ...)", 2, R::VoidNotAlone),
        ("f(void (*cb)(int))", 7, R::Parenthesized),
        ("f(int (a))", 6, R::Parenthesized),
        ("f(void a[])", 8, R::ArrayOfVoid),
        (
            "f(struct s a[2])",
            12,
            R::ArrayOfIncomplete {
                element: "struct s".into(),
            },
        ),
        ("f(int a[2][3])", 10, R::MultiDimensional),
        ("f(int a[0])", 8, R::BadArraySize { found: "0".into() }),
        (
            "f(int a[0x10])",
            8,
            R::BadArraySize {
                found: "0x10".into(),
            },
        ),
        ("f(int a[3x])", 8, R::BadArraySize { found: "3x".into() }),
        (
            "f(int a[static 3])",
            8,
            R::Expected {
                expected: Expected::ArraySize,
                found: tok("static"),
            },
        ),
        (
            "f(int a[3)",
            9,
            R::Expected {
                expected: Expected::CloseBracket,
                found: tok(")"),
            },
        ),
        (
            "f(int a b)",
            8,
            R::Expected {
                expected: Expected::CommaOrClose,
                found: tok("b"),
            },
        ),
        (
            "f(int a const)",
            8,
            R::Expected {
                expected: Expected::CommaOrClose,
                found: tok("const"),
            },
        ),
        ("f(int a = 3)", 8, R::UnexpectedChar { ch: '=' }),
        ("f(int ..)", 6, R::UnexpectedChar { ch: '.' }),
        ("f(int é)", 6, R::UnexpectedChar { ch: 'é' }),
        (
            "f(struct s { int x; } v)",
            11,
            R::UnexpectedChar { ch: '{' },
        ),
    ];
    for (spec, at, reason) in cases {
        assert_eq!(refused(spec), (at, reason.clone()), "{spec}");
        // The reason has advice, and the message names the position.
        let text = split_signature(spec).unwrap_err().to_string();
        assert!(
            text.contains(&format!("(at byte {at}); {}", reason.advice())),
            "{text}"
        );
    }
}

#[test]
fn bare_lists_are_refused_at_their_position_in_the_list() {
    let e = parse_params("int a)").unwrap_err();
    assert_eq!((e.at, e.reason), (5, SyntaxReason::StrayClose));
    let e = parse_params("int, long,").unwrap_err();
    assert_eq!((e.at, e.reason), (10, SyntaxReason::EmptyParameter));
    let e = parse_params("int a b").unwrap_err();
    assert_eq!(
        (e.at, e.reason),
        (
            6,
            SyntaxReason::Expected {
                expected: Expected::CommaOrClose,
                found: tok("b")
            }
        )
    );
    let e = parse_params("const").unwrap_err();
    assert_eq!((e.at, e.reason), (5, SyntaxReason::MissingType));
    assert_eq!(
        parse_params("int, , long").unwrap_err().to_string(),
        "an empty parameter (at byte 5)"
    );
}

#[test]
fn signatures_parse_into_types() {
    let (name, sig) = split_signature("bar(int, const char *s, unsigned char, ...)").unwrap();
    let sig = sig.unwrap();
    assert_eq!(name, "bar");
    assert!(sig.variadic());
    assert_eq!(sig.text(), "int, const char *s, unsigned char, ...");
    assert_eq!(sig.params()[1].name.as_deref(), Some("s"));
    assert_eq!(sig.params()[1].ty.name, "const char *");
    assert_eq!(sig.params()[2].ty.kind, TypeKind::Char { signed: false });
    let (name, none) = split_signature(" libc!write ").unwrap();
    assert_eq!(name, "libc!write");
    assert!(none.is_none());
    assert_eq!(
        accepted("f(struct point *p, long n)").params()[0].ty.name,
        "struct point *"
    );
}

#[test]
fn type_words_combine_in_any_order_and_normalize() {
    for (list, text, size) in [
        ("long unsigned int x", "unsigned long x", 8),
        ("int long long", "long long", 8),
        ("signed", "int", 4),
        ("unsigned", "unsigned int", 4),
        ("short signed int s", "short s", 2),
        ("char signed", "signed char", 1),
        ("double long", "long double", 16),
        (
            "int const volatile *restrict p",
            "const volatile int * restrict p",
            8,
        ),
        ("char *const *argv", "char * const *argv", 8),
        ("unsigned __int128 v", "unsigned __int128 v", 16),
        ("const size_t n", "const size_t n", 8),
        ("bool b", "bool b", 1),
        ("enum color c", "enum color c", 4),
        ("struct big b", "struct big b", 0),
    ] {
        let sig = parse_params(list).unwrap();
        assert_eq!(sig.text(), text, "{list}");
        assert_eq!(sig.params()[0].ty.size, size, "{list}");
        // The normalized text reads back as the same signature.
        assert_eq!(parse_params(sig.text()).unwrap(), sig, "{list}");
    }
}

#[test]
fn no_parameters_and_arrays_follow_c() {
    for empty in ["f()", "f(void)", "f( void )", "f(\tvoid\n)"] {
        let sig = accepted(empty);
        assert!(sig.params().is_empty() && !sig.variadic(), "{empty}");
        assert_eq!(sig.text(), "");
    }
    // Arrays decay to pointers to their element.
    let sig = accepted("f(int a[4], char *argv[], const double [])");
    assert_eq!(sig.text(), "int *a, char **argv, const double *");
    assert!(sig.params().iter().all(|p| p.ty.size == 8));
    assert!(matches!(sig.params()[0].ty.kind, TypeKind::Pointer(_)));
    // Pointers to incomplete types, and the element of an array of pointers, are fine.
    accepted("f(struct s *a[3], void *v[2])");
}

#[test]
fn split_function_keeps_cpp_lists_the_c_grammar_refuses_as_names() {
    // A C++ list: the whole text is the name, for the demangled-name lookup.
    for spec in [
        "ns::operator!=(ns::Parser const&, ns::Parser const&)",
        "f<void (*)(int)>(int)",
        "parse(std::string const&)",
        "compare(const char *) const",
        "size() const volatile",
    ] {
        assert_eq!(split_function(spec).unwrap(), (spec, None), "{spec}");
    }
    // A list C reads stays a signature (the lookup decides whether it is C++'s).
    let (name, sig) = split_function("ns::Parser::parse(long, long)").unwrap();
    assert_eq!(name, "ns::Parser::parse");
    assert_eq!(sig.unwrap().text(), "long, long");
    // The types alone are the C++ list to match, whatever the names.
    let (_, sig) = split_function("hash(const void *p, unsigned long n, ...)").unwrap();
    assert_eq!(
        sig.unwrap().types_text(),
        "const void *, unsigned long, ..."
    );
    // C mistakes are still refused.
    assert!(split_function("bar(int a[)").is_err());
    assert!(split_function("bar(int) static").is_err());
}
