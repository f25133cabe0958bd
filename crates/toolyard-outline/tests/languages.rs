//! Each grammar's outline of a small real source: kinds, names, 1-based line ranges as
//! read_file numbers them, and signatures, all written out by hand.

use toolyard_outline::{Lang, Symbol, outline, outline_dir, render};

/// `(kind, name, start, end, signature)` of each symbol, depth first, children indented by
/// a leading `.` per level in the name.
fn flat(symbols: &[Symbol]) -> Vec<(String, String, usize, usize, String)> {
    fn go(s: &[Symbol], level: usize, out: &mut Vec<(String, String, usize, usize, String)>) {
        for x in s {
            out.push((
                x.kind.to_string(),
                format!("{}{}", ".".repeat(level), x.name),
                x.start_line,
                x.end_line,
                x.signature.clone(),
            ));
            go(&x.children, level + 1, out);
        }
    }
    let mut out = Vec::new();
    go(symbols, 0, &mut out);
    out
}

fn check(lang: Lang, src: &str, want: &[(&str, &str, usize, usize, &str)]) {
    let got = flat(&outline(lang, src).unwrap());
    let want: Vec<_> = want
        .iter()
        .map(|(k, n, a, b, s)| (k.to_string(), n.to_string(), *a, *b, s.to_string()))
        .collect();
    assert_eq!(got, want, "{lang:?}");
}

#[test]
fn rust() {
    let src = r#"use std::fmt;

/// A point.
pub struct Point {
    pub x: f64,
    pub y: f64,
}

pub enum Shape {
    Circle(f64),
    Square(f64),
}

pub trait Area {
    fn area(&self) -> f64;
}

impl Area for Shape {
    fn area(&self) -> f64 {
        match self {
            Shape::Circle(r) => 3.14 * r * r,
            Shape::Square(s) => s * s,
        }
    }
}

impl Point {
    pub fn new(x: f64, y: f64) -> Self {
        Point { x, y }
    }
}

pub const ORIGIN: Point = Point { x: 0.0, y: 0.0 };

mod inner {
    pub fn helper() {}
}

macro_rules! square {
    ($x:expr) => {
        $x * $x
    };
}

pub fn total<T: Area>(shapes: &[T]) -> f64 {
    shapes.iter().map(|s| s.area()).sum()
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.x, self.y)
    }
}
"#;
    check(
        Lang::Rust,
        src,
        &[
            ("struct", "Point", 4, 7, "pub struct Point"),
            ("enum", "Shape", 9, 12, "pub enum Shape"),
            ("trait", "Area", 14, 16, "pub trait Area"),
            ("method", ".area", 15, 15, "fn area(&self) -> f64;"),
            ("impl", "Area for Shape", 18, 25, "impl Area for Shape"),
            ("method", ".area", 19, 24, "fn area(&self) -> f64"),
            ("impl", "Point", 27, 31, "impl Point"),
            (
                "method",
                ".new",
                28,
                30,
                "pub fn new(x: f64, y: f64) -> Self",
            ),
            (
                "constant",
                "ORIGIN",
                33,
                33,
                "pub const ORIGIN: Point = Point { x: 0.0, y: 0.0 };",
            ),
            ("module", "inner", 35, 37, "mod inner"),
            ("function", ".helper", 36, 36, "pub fn helper()"),
            ("macro", "square", 39, 43, "macro_rules! square"),
            (
                "function",
                "total",
                45,
                47,
                "pub fn total<T: Area>(shapes: &[T]) -> f64",
            ),
            (
                "impl",
                "fmt::Display for Point",
                49,
                53,
                "impl fmt::Display for Point",
            ),
            (
                "method",
                ".fmt",
                50,
                52,
                "fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result",
            ),
        ],
    );
}

#[test]
fn python() {
    let src = r#"import os

LIMIT = 10


class Store(Base):
    """Keeps things."""

    def __init__(self, root: str) -> None:
        self.root = root

    @property
    def size(self) -> int:
        return len(os.listdir(self.root))


@cache
def load(path: str,
         strict: bool = False) -> "Store":
    return Store(path)


async def fetch(url):
    pass
"#;
    check(
        Lang::Python,
        src,
        &[
            ("variable", "LIMIT", 3, 3, "LIMIT = 10"),
            ("class", "Store", 6, 14, "class Store(Base)"),
            (
                "method",
                ".__init__",
                9,
                10,
                "def __init__(self, root: str) -> None",
            ),
            ("method", ".size", 12, 14, "def size(self) -> int"),
            (
                "function",
                "load",
                17,
                20,
                "def load(path: str, strict: bool = False) -> \"Store\"",
            ),
            ("function", "fetch", 23, 24, "async def fetch(url)"),
        ],
    );
}

#[test]
fn javascript() {
    let src = r#"import fs from "fs";

export function parse(text) {
  return JSON.parse(text);
}

export const render = (node, depth = 0) => {
  return String(node);
};

const LIMIT = 3;

class Cache extends Map {
  constructor(limit) {
    super();
    this.limit = limit;
  }

  get(key) {
    return super.get(key);
  }
}

module.exports = { parse, render, Cache };
"#;
    check(
        Lang::JavaScript,
        src,
        &[
            ("function", "parse", 3, 5, "function parse(text)"),
            (
                "function",
                "render",
                7,
                9,
                "const render = (node, depth = 0) =>",
            ),
            ("constant", "LIMIT", 11, 11, "const LIMIT = 3;"),
            ("class", "Cache", 13, 22, "class Cache extends Map"),
            ("method", ".constructor", 14, 17, "constructor(limit)"),
            ("method", ".get", 19, 21, "get(key)"),
        ],
    );
}

#[test]
fn typescript() {
    let src = r#"export interface Shape {
  area(): number;
  name: string;
}

export type Id = string | number;

export enum Color {
  Red,
  Green,
}

export abstract class Base implements Shape {
  name = "base";
  abstract area(): number;
  describe(): string {
    return `${this.name}: ${this.area()}`;
  }
}

export function largest<T extends Shape>(shapes: T[]): T | undefined {
  return shapes.sort((a, b) => b.area() - a.area())[0];
}

namespace Util {
  export function clamp(n: number): number {
    return Math.max(0, n);
  }
}
"#;
    check(
        Lang::TypeScript,
        src,
        &[
            ("interface", "Shape", 1, 4, "interface Shape"),
            ("method", ".area", 2, 2, "area(): number"),
            ("type", "Id", 6, 6, "type Id = string | number;"),
            ("enum", "Color", 8, 11, "enum Color"),
            (
                "class",
                "Base",
                13,
                19,
                "abstract class Base implements Shape",
            ),
            ("method", ".area", 15, 15, "abstract area(): number"),
            ("method", ".describe", 16, 18, "describe(): string"),
            (
                "function",
                "largest",
                21,
                23,
                "function largest<T extends Shape>(shapes: T[]): T | undefined",
            ),
            ("namespace", "Util", 25, 29, "namespace Util"),
            (
                "function",
                ".clamp",
                26,
                28,
                "function clamp(n: number): number",
            ),
        ],
    );
}

#[test]
fn tsx() {
    let src =
        "export function App(props: { title: string }) {\n  return <h1>{props.title}</h1>;\n}\n";
    check(
        Lang::Tsx,
        src,
        &[(
            "function",
            "App",
            1,
            3,
            "function App(props: { title: string })",
        )],
    );
}

#[test]
fn go() {
    let src = r#"package store

import "fmt"

const Limit = 10

var (
	cache = map[string]int{}
)

type Store struct {
	root string
}

type Reader interface {
	Read(key string) (string, error)
}

func New(root string) *Store {
	return &Store{root: root}
}

func (s *Store) Get(key string) (string, error) {
	return fmt.Sprint(s.root, key), nil
}
"#;
    check(
        Lang::Go,
        src,
        &[
            ("constant", "Limit", 5, 5, "Limit = 10"),
            ("variable", "cache", 8, 8, "cache = map[string]int{}"),
            ("struct", "Store", 11, 13, "type Store struct"),
            ("interface", "Reader", 15, 17, "type Reader interface"),
            ("function", "New", 19, 21, "func New(root string) *Store"),
            (
                "method",
                "Get",
                23,
                25,
                "func (s *Store) Get(key string) (string, error)",
            ),
        ],
    );
}

#[test]
fn c() {
    let src = r#"#ifndef STORE_H
#define STORE_H

#include <stdio.h>

#define MAX(a, b) ((a) > (b) ? (a) : (b))

struct point {
    int x;
    int y;
};

typedef struct {
    char *name;
} entry_t;

int count;

static int add(int a, int b);

char *
name_of(const entry_t *e)
{
    return e->name;
}

#endif
"#;
    check(
        Lang::C,
        src,
        &[
            ("macro", "STORE_H", 2, 2, "#define STORE_H"),
            (
                "macro",
                "MAX",
                6,
                6,
                "#define MAX(a, b) ((a) > (b) ? (a) : (b))",
            ),
            ("struct", "point", 8, 11, "struct point"),
            ("struct", "entry_t", 13, 15, "typedef struct"),
            ("variable", "count", 17, 17, "int count;"),
            ("function", "add", 19, 19, "static int add(int a, int b);"),
            (
                "function",
                "name_of",
                21,
                25,
                "char * name_of(const entry_t *e)",
            ),
        ],
    );
}

#[test]
fn java() {
    let src = r#"package shop;

import java.util.List;

public class Cart {
    private final List<Item> items;

    public Cart(List<Item> items) {
        this.items = items;
    }

    @Override
    public String toString() {
        return "Cart";
    }

    interface Priced {
        long price();
    }

    enum Kind {
        A, B;

        boolean isA() { return this == A; }
    }
}
"#;
    check(
        Lang::Java,
        src,
        &[
            ("class", "Cart", 5, 26, "public class Cart"),
            (
                "constructor",
                ".Cart",
                8,
                10,
                "public Cart(List<Item> items)",
            ),
            (
                "method",
                ".toString",
                12,
                15,
                "@Override public String toString()",
            ),
            ("interface", ".Priced", 17, 19, "interface Priced"),
            ("method", "..price", 18, 18, "long price();"),
            ("enum", ".Kind", 21, 25, "enum Kind"),
            ("method", "..isA", 24, 24, "boolean isA()"),
        ],
    );
}

#[test]
fn render_nests_and_limits_depth() {
    let src = "class A:\n    def f(self):\n        pass\n";
    let syms = outline(Lang::Python, src).unwrap();
    assert_eq!(
        render(&syms, usize::MAX),
        "class A (line 1-3)  class A\n  method f (line 2-3)  def f(self)"
    );
    assert_eq!(render(&syms, 1), "class A (line 1-3)  class A");
}

#[test]
fn languages_by_extension() {
    for (p, l) in [
        ("a/b.rs", Lang::Rust),
        ("x.pyi", Lang::Python),
        ("x.mjs", Lang::JavaScript),
        ("x.ts", Lang::TypeScript),
        ("x.tsx", Lang::Tsx),
        ("x.go", Lang::Go),
        ("x.h", Lang::C),
        ("X.java", Lang::Java),
    ] {
        assert_eq!(Lang::of_path(p), Some(l), "{p}");
    }
    assert_eq!(Lang::of_path("README.md"), None);
    assert_eq!(Lang::of_path("Makefile"), None);
}

#[test]
fn a_directory_lists_the_most_referenced_first_within_the_budget() {
    let t = tempfile::tempdir().unwrap();
    let w = |p: &str, s: &str| {
        let f = t.path().join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, s).unwrap();
    };
    // `core` occurs 3 times besides its definition, `helper` twice, `unused` never; the
    // copies under node_modules and a hidden directory are not walked.
    w(
        "pkg/lib.py",
        "def core():\n    pass\n\n\ndef helper():\n    core()\n\n\ndef unused():\n    pass\n",
    );
    w(
        "pkg/main.py",
        "from lib import core, helper\n\ncore()\nhelper()\n",
    );
    w("pkg/node_modules/dep.py", "def core():\n    pass\n");
    w("pkg/.hidden/x.py", "def core():\n    pass\n");
    w("pkg/notes.txt", "core core core\n");
    let d = outline_dir(t.path(), "pkg", 10_000);
    let lines: Vec<&str> = d.text.lines().collect();
    assert!(
        lines[0].starts_with("pkg: 3 top-level symbols in 2 file(s) (python)"),
        "{}",
        d.text
    );
    assert_eq!(
        lines[1..],
        [
            "function core  pkg/lib.py:1-2  (3 refs)  def core()",
            "function helper  pkg/lib.py:5-6  (2 refs)  def helper()",
            "function unused  pkg/lib.py:9-10  (0 refs)  def unused()",
        ]
    );
    // A budget that holds the header and two lines leaves the last out, and says so.
    let budget = lines[0].len() + lines[1].len() + lines[2].len() + 3;
    let d = outline_dir(t.path(), "pkg", budget);
    assert_eq!(d.shown, 2, "{}", d.text);
    let last = d.text.lines().last().unwrap();
    assert!(
        last.starts_with("... 1 less referenced symbol(s) left out, from 1 file(s): pkg/lib.py.")
            && last.contains("outline {\"path\": FILE}"),
        "{}",
        d.text
    );
}

#[test]
fn a_directory_without_sources_says_what_outlines_cover() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("a.md"), "# hi\n").unwrap();
    let d = outline_dir(t.path(), "", 1000);
    assert!(
        d.text
            .starts_with(".: no source files with a grammar here (outlines cover .rs"),
        "{}",
        d.text
    );
}
