package nodeutil

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestListInPages: every page is asked with the limit and the previous
// page's continue token, and handed over in order until a page has none;
// an error ends the list.
func TestListInPages(t *testing.T) {
	pages := map[string]*corev1.PodList{
		"":   {ListMeta: metav1.ListMeta{Continue: "p2"}, Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}},
		"p2": {ListMeta: metav1.ListMeta{Continue: "p3"}, Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "b"}}}},
		"p3": {Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "c"}}}},
	}
	var asked []string
	list := func(_ context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
		assert.Equal(t, int64(2), opts.Limit)
		asked = append(asked, opts.Continue)
		page, ok := pages[opts.Continue]
		if !ok {
			return nil, errors.New("no such page")
		}
		return page, nil
	}
	var names []string
	require.NoError(t, ListInPages(context.Background(), 2, list, func(page *corev1.PodList) {
		for _, pod := range page.Items {
			names = append(names, pod.Name)
		}
	}))
	assert.Equal(t, []string{"", "p2", "p3"}, asked)
	assert.Equal(t, []string{"a", "b", "c"}, names)

	pages["p2"].Continue = "gone"
	err := ListInPages(context.Background(), 2, list, func(*corev1.PodList) {})
	assert.EqualError(t, err, "no such page")
}
