package nodeset

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

// TestConditionMessageFits: a message longer than the API server takes in
// a condition is cut to fit, on a character boundary, and says so; one
// that fits is left alone.
func TestConditionMessageFits(t *testing.T) {
	tests := []struct {
		name    string
		message string
	}{
		{"short", "spec.template.labels key \"a\": invalid"},
		{"exactly the bound", strings.Repeat("a", maxConditionMessage)},
		{"ascii over the bound", strings.Repeat("a", 3*maxConditionMessage)},
		{"multi-byte characters across the cut", strings.Repeat("é", maxConditionMessage)},
		{"four-byte characters across the cut", "x" + strings.Repeat("𝄞", maxConditionMessage/2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := conditionMessage(tt.message)
			assert.LessOrEqual(t, len(got), maxConditionMessage)
			assert.True(t, utf8.ValidString(got), "cut on a character boundary")
			if len(tt.message) <= maxConditionMessage {
				assert.Equal(t, tt.message, got)
				return
			}
			assert.True(t, strings.HasSuffix(got, "(cut)"), "says it is cut")
			assert.True(t, strings.HasPrefix(tt.message, strings.TrimSuffix(got, " ... (cut)")), "keeps the beginning")
		})
	}
}
