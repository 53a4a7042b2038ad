/* placeholder until the entry point lands */
int main(void);
int main(void)
{
	return 1;
}
