package internal

import (
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestPublicSurface checks that every exported declaration of a package a
// user may import (non-internal, non-main) is built only of types the user
// may import too: a function, field or method that names a type under an
// internal/ directory cannot be called, filled or read from outside the
// module. It reads the compiler's export data, so it sees what the compiler
// sees, promoted methods and aliases included.
func TestPublicSurface(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	var public []string
	for _, l := range goList(t, gobin, []string{"-f", "{{.ImportPath}} {{.Name}}", module + "..."}) {
		path, name, _ := strings.Cut(l, " ")
		if name != "main" && !isInternal(path) {
			public = append(public, path)
		}
	}
	exports := map[string]string{}
	for _, l := range goList(t, gobin, append([]string{"-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}, public...)) {
		if path, file, ok := strings.Cut(l, " "); ok && file != "" {
			exports[path] = file
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var found []string
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		found = append(found, leaks(pkg)...)
	}
	slices.Sort(found)
	for _, f := range slices.Compact(found) {
		t.Errorf("%s", f)
	}
	if len(found) > 0 {
		t.Log("an exported API names an internal type a user outside the module cannot import: " +
			"define the type the API needs in the public package (or status) and convert at the boundary, " +
			"or keep the API to allot's own packages under internal/")
	}
}

// isInternal reports whether path is an internal package or under one.
func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}

// leaks returns one line per place an exported declaration of pkg names an
// internal type: "pkg.Decl[.Field|.Method]: internal/x.T".
func leaks(pkg *types.Package) []string {
	var out []string
	short := strings.TrimPrefix(pkg.Path(), module)
	report := func(where string, typ types.Type) {
		for _, n := range internalNames(typ) {
			out = append(out, fmt.Sprintf("%s.%s: %s", short, where, n))
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Func, *types.Var, *types.Const:
			report(name, obj.Type())
		case *types.TypeName:
			if obj.IsAlias() {
				report(name, types.Unalias(obj.Type()))
				continue
			}
			named, ok := obj.Type().(*types.Named)
			if !ok {
				continue
			}
			for i := range named.TypeParams().Len() {
				report(name, named.TypeParams().At(i).Constraint())
			}
			switch u := named.Underlying().(type) {
			case *types.Struct:
				for i := range u.NumFields() {
					if f := u.Field(i); f.Exported() {
						report(name+"."+f.Name(), f.Type())
					}
				}
			case *types.Interface:
				// Unexported methods, an embedded internal interface's
				// included, only seal the interface: a user cannot call
				// them, so they are no part of the surface.
				for i := range u.NumMethods() {
					if m := u.Method(i); m.Exported() {
						report(name+"."+m.Name(), m.Type())
					}
				}
			default:
				report(name, u)
			}
			// Methods of *T include T's and any promoted from embedded fields.
			ms := types.NewMethodSet(types.NewPointer(named))
			for i := range ms.Len() {
				if m := ms.At(i).Obj(); m.Exported() {
					report(name+"."+m.Name(), m.Type())
				}
			}
		}
	}
	return out
}

// internalNames returns the internal named types typ is built of, looking
// through composite types but not into named types' definitions: a public
// named type is checked where it is declared.
func internalNames(typ types.Type) []string {
	var out []string
	seen := map[types.Type]bool{}
	var walk func(types.Type)
	walk = func(t types.Type) {
		if t == nil || seen[t] {
			return
		}
		seen[t] = true
		switch t := t.(type) {
		case *types.Alias:
			if p := t.Obj().Pkg(); p != nil && isInternal(p.Path()) {
				out = append(out, strings.TrimPrefix(p.Path(), module)+"."+t.Obj().Name())
			}
			walk(types.Unalias(t))
		case *types.Named:
			if p := t.Obj().Pkg(); p != nil && isInternal(p.Path()) {
				out = append(out, strings.TrimPrefix(p.Path(), module)+"."+t.Obj().Name())
			}
			for i := range t.TypeArgs().Len() {
				walk(t.TypeArgs().At(i))
			}
		case *types.Pointer:
			walk(t.Elem())
		case *types.Slice:
			walk(t.Elem())
		case *types.Array:
			walk(t.Elem())
		case *types.Map:
			walk(t.Key())
			walk(t.Elem())
		case *types.Chan:
			walk(t.Elem())
		case *types.Signature:
			walk(t.Params())
			walk(t.Results())
		case *types.Tuple:
			for i := range t.Len() {
				walk(t.At(i).Type())
			}
		case *types.Struct:
			for i := range t.NumFields() {
				if f := t.Field(i); f.Exported() || f.Embedded() {
					walk(f.Type())
				}
			}
		case *types.Interface:
			for i := range t.NumMethods() {
				walk(t.Method(i).Type())
			}
			for i := range t.NumEmbeddeds() {
				walk(t.EmbeddedType(i))
			}
		case *types.Union:
			for i := range t.Len() {
				walk(t.Term(i).Type())
			}
		case *types.TypeParam:
			walk(t.Constraint())
		}
	}
	walk(typ)
	return out
}
