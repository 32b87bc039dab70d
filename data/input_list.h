#ifndef KVCPT_INPUT_LIST_H
#define KVCPT_INPUT_LIST_H
/* Expands --input arguments: a file is taken as is (it must be a supported
 * kind and readable); a directory contributes every supported file below it,
 * in sorted path order, so the same tree always gives the same order. */
typedef struct {
    char **paths;
    int count;
} InputList;

void input_list_add(InputList *l, const char *path);
void input_list_free(InputList *l);

#endif
