package luascript

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
)

// An argPlan is how a keys or arguments struct becomes a script's KEYS or
// ARGV: each field's kind, read from the type once (planOf) and cached. A
// call reads the fields by index, with no look-up of tags or types.
type argPlan struct {
	typ    reflect.Type
	names  []string // the fields' `lua` tags, in order
	fields []argField
	// spread: the last field is a []any whose elements are the last
	// arguments, any number of them (a script that takes a list).
	spread bool
}

type argField struct {
	kind argKind
}

type argKind uint8

const (
	kString argKind = iota
	kInt
	kInt64
	kBool
	kBytes
	kSpread
)

var plans sync.Map // planKey → *argPlan

// planKey: a type's plan as KEYS is not its plan as ARGV (a key is a
// string, an argument may be a number).
type planKey struct {
	typ  reflect.Type
	keys bool
}

// planOf is T's plan, made on first use. keys: T's fields are all strings
// (KEYS).
func planOf[T any](keys bool) *argPlan {
	t := reflect.TypeFor[T]()
	if p, ok := plans.Load(planKey{t, keys}); ok {
		return p.(*argPlan)
	}
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("luascript: %s is no struct", t))
	}
	p := &argPlan{typ: t}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("lua")
		if !ok {
			panic(fmt.Sprintf("luascript: %s.%s has no lua tag", t, f.Name))
		}
		var af argField
		switch {
		case f.Type.Kind() == reflect.String:
			af.kind = kString
		case keys:
			panic(fmt.Sprintf("luascript: %s.%s: a key is a string, not a %s", t, f.Name, f.Type))
		case f.Type.Kind() == reflect.Int:
			af.kind = kInt
		case f.Type.Kind() == reflect.Int64:
			af.kind = kInt64
		case f.Type.Kind() == reflect.Bool:
			af.kind = kBool
		case f.Type == reflect.TypeFor[[]byte]():
			af.kind = kBytes
		case f.Type == reflect.TypeFor[[]any]() && i == t.NumField()-1:
			af.kind, p.spread = kSpread, true
		default:
			panic(fmt.Sprintf("luascript: %s.%s: a %s is no script argument", t, f.Name, f.Type))
		}
		p.names = append(p.names, tag)
		p.fields = append(p.fields, af)
	}
	actual, _ := plans.LoadOrStore(planKey{t, keys}, p)
	return actual.(*argPlan)
}

// check compares the struct's tags with a header's names.
func (p *argPlan) check(what string, header []string) error {
	if !slices.Equal(p.names, header) {
		return fmt.Errorf("%s: the header names %v, Go's %s %v", what, header, p.typ, p.names)
	}
	return nil
}

// keys reads the strings of the keys struct v (of p's type).
func (p *argPlan) keys(v reflect.Value) []string {
	out := make([]string, len(p.fields))
	for i := range p.fields {
		out[i] = v.Field(i).String()
	}
	return out
}

// argv reads the arguments struct v (of p's type).
func (p *argPlan) argv(v reflect.Value) []any {
	n := len(p.fields)
	var rest []any
	if p.spread {
		n--
		rest, _ = v.Field(n).Interface().([]any)
	}
	out := make([]any, n, n+len(rest))
	for i, f := range p.fields[:n] {
		fv := v.Field(i)
		switch f.kind {
		case kString:
			out[i] = fv.String()
		case kInt, kInt64:
			out[i] = fv.Int()
		case kBool:
			if fv.Bool() {
				out[i] = int64(1)
			} else {
				out[i] = int64(0)
			}
		case kBytes:
			out[i] = fv.Bytes()
		}
	}
	return append(out, rest...)
}

// A replyPlan is how a script's reply fills a reply struct: field i takes
// element i (the first the code); a last field of a slice of structs
// takes the rest, one struct a row of as many elements as it has fields
// (a slice of scalars, one element each).
type replyPlan struct {
	typ    reflect.Type
	names  []string
	fixed  int          // fields before the rows
	row    reflect.Type // the rows' type; nil without rows
	rowLen int
}

var replyPlans sync.Map // reflect.Type → *replyPlan

func replyPlanOf[R any]() *replyPlan {
	t := reflect.TypeFor[R]()
	if p, ok := replyPlans.Load(t); ok {
		return p.(*replyPlan)
	}
	if t.Kind() != reflect.Struct || t.NumField() == 0 {
		panic(fmt.Sprintf("luascript: reply %s is no struct with fields", t))
	}
	p := &replyPlan{typ: t, fixed: t.NumField()}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("lua")
		if !ok {
			panic(fmt.Sprintf("luascript: %s.%s has no lua tag", t, f.Name))
		}
		p.names = append(p.names, tag)
		switch {
		case i == 0 && f.Type.Kind() != reflect.Int64 && f.Type.Kind() != reflect.Int:
			panic(fmt.Sprintf("luascript: %s.%s: the first element is the code, an integer", t, f.Name))
		case scalar(f.Type):
		case f.Type.Kind() == reflect.Slice && i == t.NumField()-1 && i > 0:
			p.row, p.fixed = f.Type.Elem(), i
			p.rowLen = 1
			if p.row.Kind() == reflect.Struct {
				p.rowLen = p.row.NumField()
				for j := range p.rowLen {
					if !scalar(p.row.Field(j).Type) {
						panic(fmt.Sprintf("luascript: %s.%s: a row's field %s is a %s", t, f.Name, p.row.Field(j).Name, p.row.Field(j).Type))
					}
				}
			} else if !scalar(p.row) {
				panic(fmt.Sprintf("luascript: %s.%s: rows of %s", t, f.Name, p.row))
			}
		default:
			panic(fmt.Sprintf("luascript: %s.%s: a %s is no reply element", t, f.Name, f.Type))
		}
	}
	actual, _ := replyPlans.LoadOrStore(t, p)
	return actual.(*replyPlan)
}

func scalar(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Int, reflect.Int64, reflect.Bool:
		return true
	}
	return false
}

// kinds are what the elements before the rows are read as.
func (p *replyPlan) kinds() []string {
	out := make([]string, p.fixed)
	for i := range p.fixed {
		switch p.typ.Field(i).Type.Kind() {
		case reflect.String:
			out[i] = "string"
		case reflect.Bool:
			out[i] = "flag"
		default:
			out[i] = "integer"
		}
	}
	return out
}

// max is how many elements a reply has at most; -1: any number (rows).
func (p *replyPlan) max() int {
	if p.row != nil {
		return -1
	}
	return p.fixed
}

// decode fills the struct r points to from res. A reply may be shorter
// than its struct (a refusal says less than a success: the rest stay
// zero), never longer, nor hold a part of a row.
func (p *replyPlan) decode(r any, res []any) error {
	v := reflect.ValueOf(r).Elem()
	if p.row == nil && len(res) > p.fixed {
		return fmt.Errorf("a reply of %d elements, %s has %d", len(res), p.typ, p.fixed)
	}
	for i := 0; i < p.fixed && i < len(res); i++ {
		if err := set(v.Field(i), res[i]); err != nil {
			return fmt.Errorf("element %d (%s): %w", i+1, p.names[i], err)
		}
	}
	if p.row == nil || len(res) <= p.fixed {
		return nil
	}
	rest := res[p.fixed:]
	if len(rest)%p.rowLen != 0 {
		return fmt.Errorf("%d elements after the first %d: not rows of %d", len(rest), p.fixed, p.rowLen)
	}
	rows := reflect.MakeSlice(v.Field(p.fixed).Type(), len(rest)/p.rowLen, len(rest)/p.rowLen)
	for i := range rows.Len() {
		row := rows.Index(i)
		if p.row.Kind() != reflect.Struct {
			if err := set(row, rest[i]); err != nil {
				return fmt.Errorf("row %d: %w", i+1, err)
			}
			continue
		}
		for j := range p.rowLen {
			if err := set(row.Field(j), rest[i*p.rowLen+j]); err != nil {
				return fmt.Errorf("row %d, element %d: %w", i+1, j+1, err)
			}
		}
	}
	v.Field(p.fixed).Set(rows)
	return nil
}

// set puts a reply element in a field of its type: an integer in an
// integer or a bool (non-zero: true), a string in a string. nil (Lua's
// false or nil) leaves the field zero.
func set(f reflect.Value, e any) error {
	if e == nil {
		return nil
	}
	switch f.Kind() {
	case reflect.Int, reflect.Int64:
		n, ok := e.(int64)
		if !ok {
			return fmt.Errorf("%T %v where an integer is read", e, e)
		}
		f.SetInt(n)
	case reflect.Bool:
		n, ok := e.(int64)
		if !ok {
			return fmt.Errorf("%T %v where a flag (1/0) is read", e, e)
		}
		f.SetBool(n != 0)
	case reflect.String:
		s, ok := e.(string)
		if !ok {
			return fmt.Errorf("%T %v where a string is read", e, e)
		}
		f.SetString(s)
	}
	return nil
}
