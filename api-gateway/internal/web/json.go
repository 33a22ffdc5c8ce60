package web

import (
	"encoding/json"

	"github.com/labstack/echo/v4"
)

// jsonSerializer writes JSON without HTML escaping, so result URLs read
// "&sig=" rather than "\u0026sig=" in a terminal.
type jsonSerializer struct{}

func (jsonSerializer) Serialize(c echo.Context, v any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(v)
}

func (jsonSerializer) Deserialize(c echo.Context, v any) error {
	return json.NewDecoder(c.Request().Body).Decode(v)
}
