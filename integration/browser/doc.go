// Package browser drives the real fence-demo binary's serve mode in headless
// Chromium (Debian's chromium package, installed by scripts/install-chromium.sh
// when missing): two tabs of one conversation, a takeover, a network cut and
// a stalled owner's late write. It is a nested module so that the main
// module does not depend on chromedp; it builds cmd/fence-demo from the
// repository and runs it against TEST_DATABASE_URL and TEST_MINIO_*.
// Screenshots go to the git-ignored folder out/.
package browser
