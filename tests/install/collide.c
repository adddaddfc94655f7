/* collide.c: a host program with its own read_file and cache_get (names the library uses
 * inside) links against libffn.a, and its functions are the ones called. */
#include <ffn.h>
#include <stdio.h>
#include <string.h>

static int calls;
int read_file(const char *path) { return calls += (int)strlen(path) > 0; }
int cache_get(int key) { return calls += key; }

int main(void) {
  ffn_program *p;
  const char *src = "model m\ninput x : [4] f32\noutput y\n"; /* y is undefined */
  ffn_status s = ffn_program_compile(src, strlen(src), "bad.ffn", NULL, &p);
  if (s != FFN_ERR_SOURCE || !strstr(ffn_last_error(), "bad.ffn:")) {
    fprintf(stderr, "collide: expected a diagnostic, got %s: %s\n", ffn_status_string(s), ffn_last_error());
    return 1;
  }
  if (read_file("x") + cache_get(1) != 3) {
    fprintf(stderr, "collide: the library's read_file or cache_get was called\n");
    return 1;
  }
  printf("collide: ok (%s)\n", ffn_build_info());
  return 0;
}
