package weir_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every Go snippet of the README is lifted from code that go test
// compiles and runs: an Example function (example_test.go), the README's
// test in weirtest (readme_test.go), or the quick start program
// (examples/quickstart, run by its Example). A snippet matches when its
// lines, without indentation, appear one after another in such a file.
func TestReadmeSnippetsAreExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?ms)^ *```go\n(.*?)^ *```").FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("no Go snippets found in README.md")
	}
	var sources []string // the contents of the files snippets may come from, trimmed line by line
	var names []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		base := filepath.Base(path)
		if !strings.HasSuffix(base, "example_test.go") && base != "readme_test.go" && path != filepath.Join("examples", "quickstart", "main.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sources = append(sources, "\n"+trimLines(string(b))+"\n")
		names = append(names, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		snippet := trimLines(strings.TrimRight(string(b[1]), "\n"))
		found := false
		for _, src := range sources {
			if strings.Contains(src, "\n"+snippet+"\n") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README snippet not found in any of %v (keep the README and the examples in step):\n%s", names, b[1])
		}
	}
}

func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}
