package examples

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/flow"
)

func TestPositiveDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     time.Duration
		wantErr  string
	}{
		{"EmptyTakesTheDefault", "", time.Minute, ""},
		{"Seconds", "30s", 30 * time.Second, ""},
		{"Compound", "1h2m", time.Hour + 2*time.Minute, ""},
		{"Malformed", "soon", 0, `timeout must be a positive duration such as "1m", got "soon"`},
		{"NoUnit", "30", 0, `timeout must be a positive duration such as "1m", got "30"`},
		{"Zero", "0s", 0, `timeout must be a positive duration such as "1m", got "0s"`},
		{"Negative", "-5s", 0, `timeout must be a positive duration such as "1m", got "-5s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := positiveDuration("timeout", tt.in, "1m")
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				require.Equal(t, flow.KindInvalidInput, flow.KindOf(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
