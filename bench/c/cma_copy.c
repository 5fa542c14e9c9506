/* process_vm_readv against memcpy on this host (docs/shm.md, single copy): a forked child
 * copies its parent's buffer of N bytes repeatedly with each. Usage: cma_copy N HUGE
 * (HUGE=1: the buffer is madvise(MADV_HUGEPAGE)). Build: cc -O2 -o cma_copy cma_copy.c */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t n=atol(argv[1]); int huge=atoi(argv[2]);
  size_t al=2<<20; size_t sz=(n+al-1)/al*al;
  char*src=mmap(0,sz+al,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  src=(char*)(((unsigned long)src+al-1)&~(al-1));
  if(huge) madvise(src,sz,MADV_HUGEPAGE);
  memset(src,1,n);
  pid_t parent=getpid();
  pid_t c=fork();
  if(c==0){
    char*dst=malloc(n); memset(dst,0,n);
    int reps=n<(1<<20)?2000:(n<(16<<20)?200:20);
    struct iovec l={dst,n}, r={src,n};
    process_vm_readv(parent,&l,1,&r,1,0);
    double t0=now();
    for(int i=0;i<reps;i++) if(process_vm_readv(parent,&l,1,&r,1,0)!=(ssize_t)n){perror("pvr");return 1;}
    double t1=now();
    for(int i=0;i<reps;i++) memcpy(dst,src,n);
    double t2=now();
    printf("%zu huge=%d process_vm_readv %.0f MB/s  memcpy %.0f MB/s\n",n,huge,n*reps/(t1-t0)/1e6,n*reps/(t2-t1)/1e6);
    return 0;
  }
  waitpid(c,0,0); return 0;
}
