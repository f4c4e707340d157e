package layering

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/weirstream/weir"

// root is the module's directory, from this package's.
const root = "../.."

// pkg is one package of the tree: its path inside the module ("" for the
// root package), its non-test imports and the directory it is in.
type pkg struct {
	rel     string
	imports []string
	dir     string
	files   []string
}

// loadTree lists every package of the module with the imports of its
// non-test files (for this platform's build constraints).
func loadTree(t *testing.T) []pkg {
	t.Helper()
	var out []pkg
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			rel = ""
		}
		out = append(out, pkg{rel: rel, imports: bp.Imports, dir: path, files: bp.GoFiles})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("found %d packages under %s: not the module's tree", len(out), root)
	}
	return out
}

// weirImports returns p's imports of weir packages, as paths inside the
// module ("" for the root package).
func weirImports(p pkg) []string {
	var out []string
	for _, im := range p.imports {
		switch {
		case im == module:
			out = append(out, "")
		case strings.HasPrefix(im, module+"/"):
			out = append(out, strings.TrimPrefix(im, module+"/"))
		}
	}
	return out
}

// under reports whether package p is x or below it ("" is the root
// package only).
func under(p, x string) bool {
	if x == "" {
		return p == ""
	}
	return p == x || strings.HasPrefix(p, x+"/")
}

// tableOrder reads the package table of docs/architecture.md: each listed
// package (`weir` (root) is "", a name ending in /… stands for the
// packages below it) with its position, rows in order and packages within
// a row in order.
func tableOrder(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	order := map[string]int{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Packages"
			continue
		case !in || !strings.HasPrefix(line, "| `"):
			continue
		}
		cell := strings.Split(line, "|")[1]
		for _, part := range strings.Split(cell, ",") {
			part = strings.TrimSpace(part)
			name, _, ok := strings.Cut(strings.TrimPrefix(part, "`"), "`")
			if !ok {
				t.Fatalf("docs/architecture.md: package cell %q is not a list of `package`s", cell)
			}
			if name == "weir" {
				name = ""
			}
			name = strings.TrimSuffix(name, "/…")
			order[name] = len(order)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(order) < 20 {
		t.Fatalf("docs/architecture.md: found %d packages in the table under ## Packages", len(order))
	}
	return order
}

// position is p's position in the table: its own, or, for a package not
// listed, just after the longest listed package it is below. ok is false
// when neither is listed.
func position(order map[string]int, p string) (pos float64, ok bool) {
	if i, ok := order[p]; ok {
		return float64(i), true
	}
	best := -1
	for x, i := range order {
		if x != "" && under(p, x) && (best < 0 || len(x) > len(keyOf(order, best))) {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	return float64(best) + 0.5, true
}

func keyOf(order map[string]int, i int) string {
	for x, j := range order {
		if j == i {
			return x
		}
	}
	return ""
}

// TestImportsFollowTheTable checks that every package is in
// docs/architecture.md's table and imports only weir packages listed
// before it.
func TestImportsFollowTheTable(t *testing.T) {
	order := tableOrder(t)
	for _, p := range loadTree(t) {
		pp, ok := position(order, p.rel)
		if !ok {
			t.Errorf("package %q is not in docs/architecture.md's package table", p.rel)
			continue
		}
		for _, im := range weirImports(p) {
			ip, ok := position(order, im)
			// Packages below one "/…" entry (examples/…) are not ordered
			// among themselves.
			_, listed := order[p.rel]
			if ok && (ip > pp || ip == pp && listed) && !under(im, p.rel) {
				t.Errorf("package %q imports %q, listed after it in docs/architecture.md's package table", p.rel, im)
			}
		}
	}
}

// forbidden is the list of docs/architecture.md's rules: a package (and
// those below it) imports none of the packages listed (nor those below
// them).
var forbidden = []struct {
	pkg   string
	never []string
}{
	{"buffer", []string{"network", "barrier", "state", "task", "coordinator"}},
	{"barrier", []string{"buffer", "network", "state", "task", "coordinator"}},
	{"codec", []string{"buffer", "network", "barrier", "state", "task", "coordinator", "cluster", "eventtime"}},
	{"state", []string{"network", "task", "coordinator", "cluster"}},
	{"eventtime", []string{"network", "task", "coordinator", "cluster"}},
	{"network", []string{"state", "task", "coordinator", "cluster", "eventtime/window"}},
	{"task", []string{"coordinator", "cluster"}},
	{"coordinator", []string{"network", "task", "cluster"}},
}

// users are the packages that are not runtime: they may import the root
// package, the harness and connectors.
var users = []string{"examples", "e2e", "weirtest", "connectors", "internal/failpaths", "internal/integrity", "internal/upgradetest", "internal/layering"}

// TestImportRules checks the rules of docs/architecture.md beyond the
// table's order.
func TestImportRules(t *testing.T) {
	for _, p := range loadTree(t) {
		ims := weirImports(p)
		for _, r := range forbidden {
			if !under(p.rel, r.pkg) {
				continue
			}
			for _, im := range ims {
				for _, n := range r.never {
					if under(im, n) {
						t.Errorf("package %q imports %q: %s must not import %s", p.rel, im, r.pkg, n)
					}
				}
			}
		}
		if p.rel == "internal/keygroup" || p.rel == "internal/clock" || p.rel == "internal/cputime" {
			if len(ims) > 0 {
				t.Errorf("package %q imports weir packages %q: it imports none", p.rel, ims)
			}
		}
		runtime := p.rel != "" && !slices.ContainsFunc(users, func(u string) bool { return under(p.rel, u) })
		if runtime {
			for _, im := range ims {
				if im == "" || under(im, "weirtest") || under(im, "connectors") {
					t.Errorf("runtime package %q imports %q", p.rel, im)
				}
			}
		}
		if p.rel == "" {
			for _, im := range p.imports {
				if strings.HasPrefix(im, "google.golang.org/grpc") || im == module+"/cluster" || strings.HasPrefix(im, module+"/cluster/") {
					t.Errorf("the root package imports %q", im)
				}
			}
		}
	}
}

// concreteAssertions are the known type assertions of a pointer to
// another weir package's type, by file and type, each with the work that
// removes it; the test fails on any other.
var concreteAssertions = map[string]string{
	"internal/jobmaster/checkpointing.go state.FileStorage":       "issue 25: the storage seam",
	"internal/jobmaster/cluster_coordinator.go state.FileStorage": "issue 25: the storage seam",
}

// TestNoConcreteTypeAssertions checks that no non-test code type-asserts
// (or type-switches on) a pointer to a type of another weir package: a
// seam is an interface, and a backend's extras are optional interfaces
// (state.ValueKeyBackend), so that a second implementation gets the same
// treatment. An interface is never asserted as a pointer, so every hit is
// a concrete type.
func TestNoConcreteTypeAssertions(t *testing.T) {
	for _, p := range loadTree(t) {
		for _, name := range p.files {
			path := filepath.Join(p.dir, name)
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			weir := map[string]bool{}
			for _, im := range f.Imports {
				ip := strings.Trim(im.Path.Value, `"`)
				if ip != module && !strings.HasPrefix(ip, module+"/") {
					continue
				}
				local := ip[strings.LastIndex(ip, "/")+1:]
				if im.Name != nil {
					local = im.Name.Name
				}
				weir[local] = true
			}
			check := func(e ast.Expr) {
				star, ok := e.(*ast.StarExpr)
				if !ok {
					return
				}
				x := star.X
				switch ix := x.(type) {
				case *ast.IndexExpr:
					x = ix.X
				case *ast.IndexListExpr:
					x = ix.X
				}
				sel, ok := x.(*ast.SelectorExpr)
				if !ok {
					return
				}
				id, ok := sel.X.(*ast.Ident)
				if !ok || !weir[id.Name] {
					return
				}
				rel := filepath.ToSlash(filepath.Join(p.rel, name))
				key := rel + " " + id.Name + "." + sel.Sel.Name
				if _, known := concreteAssertions[key]; !known {
					t.Errorf("%s: type assertion to *%s.%s, a concrete type of another package: use an interface its consumer owns", fset.Position(e.Pos()), id.Name, sel.Sel.Name)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.TypeAssertExpr:
					if n.Type != nil {
						check(n.Type)
					}
				case *ast.TypeSwitchStmt:
					for _, c := range n.Body.List {
						for _, e := range c.(*ast.CaseClause).List {
							check(e)
						}
					}
				}
				return true
			})
		}
	}
}
